"""The watchdog between the process actuator and one engine: ``python -m planner.actuators.procwatch GRACE_S CMD...``.

Why a watchdog: an engine must not outlive the controller that started it, however the controller ends -
SIGKILL included, when no cleanup code runs. PR_SET_PDEATHSIG alone does not do it: it fires when the
*thread* that forked the child exits (a controller that applies from a worker thread would kill its
engines when that thread ends), and it reaches only the direct child, not the processes a server forks
(vLLM's EngineCore and workers). So the actuator starts this small process instead, in a new session
(its own process group), with a pipe on its stdin whose write end only the controller holds:

- the pipe reads EOF exactly when the controller is gone (the kernel closes its end whatever killed it):
  the watchdog sends SIGTERM to the whole group, waits GRACE_S, then SIGKILL (itself included);
- the engine exits on its own (a crash): the watchdog kills what the engine left in the group (its
  orphaned children) and exits, so the actuator sees one process end;
- the actuator stops a replica by signalling the group: SIGTERM reaches the engine (this process
  shrugs it off and waits for the engine), SIGKILL after the grace reaches everything.

The engine itself gets PR_SET_PDEATHSIG(SIGTERM), set here in a single-threaded process, so killing the
watchdog alone still ends it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

from planner.procfs import group_members

PR_SET_PDEATHSIG = 1
POLL_S = 0.2


def _engine_preexec() -> None:  # in the engine, between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the group signals still end it


def _kill_group(sig: int) -> None:
    try:
        os.killpg(os.getpgrp(), sig)
    except ProcessLookupError:
        pass


def _orphaned(engine: subprocess.Popen[bytes], grace_s: float) -> int:
    """The controller is gone: end the engine, then everything in the group (this process last)."""
    sys.stderr.write("procwatch: the controller is gone; stopping the engine\n")
    sys.stderr.flush()
    _kill_group(signal.SIGTERM)
    try:
        engine.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _kill_group(signal.SIGKILL)
    return 1  # not reached: SIGKILL took this process too


def watch(grace_s: float, command: list[str]) -> int:
    # A handler, not SIG_IGN: handlers revert to the default at exec, so the engine still dies of SIGTERM.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    try:
        engine = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=_engine_preexec)
    except OSError as exc:
        sys.stderr.write(f"procwatch: cannot start {command[0]!r}: {exc}\n")
        return 127
    while True:
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], POLL_S)
        if readable and not os.read(sys.stdin.fileno(), 4096):
            return _orphaned(engine, grace_s)
        code = engine.poll()
        if code is not None:
            sys.stderr.write(f"procwatch: engine exited with {code}\n")
            sys.stderr.flush()
            # What the engine forked may still be running (a crashed API server leaves its engine core).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            others = _group_others()
            for pid in others:
                _kill(pid, signal.SIGKILL)
            time.sleep(0.05 if others else 0)
            return code if code >= 0 else 128 - code


def _group_others() -> list[int]:
    """Other live processes of this process group (read from /proc; empty where there is none)."""
    me = os.getpid()
    return [pid for pid, _comm, state in group_members(os.getpgrp()) if pid != me and state != "Z"]


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: python -m planner.actuators.procwatch GRACE_S COMMAND [ARG...]\n")
        return 2
    return watch(float(argv[0]), argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
