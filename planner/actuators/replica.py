"""One local engine replica of the process actuator: its process group, readiness, in-flight count and stop.

The engine runs under ``procwatch.py`` (see there) in a session of its own, so that stopping a replica
signals the whole group (the engine and whatever it forked) and the controller's death, however it
happens, ends the group too.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"  # replicas are local: the actuator, the router and Prometheus reach them here
WATCHDOG = Path(__file__).with_name("procwatch.py")
PLACEHOLDERS = ("{port}", "{pool}")


def substitute(command: Sequence[str], port: int, pool: str) -> list[str]:
    """``{port}`` and ``{pool}`` replaced literally: other braces are left alone (JSON arguments such as vLLM's
    --kv-transfer-config contain them)."""
    return [arg.replace("{port}", str(port)).replace("{pool}", pool) for arg in command]


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port`` on any address (a replica bound to 127.0.0.1 or 0.0.0.0 would clash).

    SO_REUSEADDR as servers set it: a socket of a replica that just stopped (TIME_WAIT) does not count.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int] | None:
    """The ports the kernel hands out for bind(0) and outgoing connections (None where it does not say)."""
    try:
        low, high = path.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


@dataclass(eq=False)
class Replica:
    pool: str
    port: int
    command: list[str]
    env: Mapping[str, str]
    log_path: Path
    state: str = "starting"  # starting -> ready -> draining -> (gone); starting -> (gone)
    proc: subprocess.Popen[bytes] | None = None
    launched_s: float = 0.0  # time.monotonic()
    ready_s: float | None = None  # seconds from launch to ready

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None  # the watchdog leads its own session

    def launch(self, grace_s: float) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:
            # stdin: a pipe whose write end only this process holds; the watchdog reads EOF when we are gone.
            self.proc = subprocess.Popen([sys.executable, "-I", str(WATCHDOG), f"{grace_s:g}", *self.command],
                                         stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.launched_s = time.monotonic()

    def exit_code(self) -> int | None:
        """None while the replica's process runs; its exit status once it ended."""
        return None if self.proc is None else self.proc.poll()

    def answers(self, timeout_s: float = 2.0) -> bool:
        """/health answers 200 and /v1/models lists a model: the HTTP server and the engine are up."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout_s) as r:
                if r.status != 200:
                    return False
            with urllib.request.urlopen(f"{self.url}/v1/models", timeout=timeout_s) as r:
                models = json.loads(r.read())
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return isinstance(models, dict) and bool(models.get("data"))

    def in_flight(self, gauges: Sequence[str], timeout_s: float = 2.0) -> float | None:
        """Requests the engine holds (the sum of the dialect's in-system gauges); None when unknown."""
        return engine_in_flight(self.url, gauges, timeout_s)

    def last_log_line(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines()
                     if ln.strip() and not ln.startswith("procwatch:")]  # the engine's words, not the watchdog's
        except OSError:
            return "(no log)"
        return lines[-1][-300:] if lines else "(empty log)"

    def stop(self, grace_s: float) -> bool:
        """SIGTERM to the group, up to ``grace_s`` for all of it to end, then SIGKILL; True if SIGKILL was needed."""
        if self.proc is None:
            return False
        pgid = self.proc.pid
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        killed = not _wait_group(self.proc, pgid, deadline)
        if killed:
            _signal_group(pgid, signal.SIGKILL)
            _wait_group(self.proc, pgid, time.monotonic() + 10.0)
        self._close_pipe()
        return killed

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


def engine_in_flight(url: str, gauges: Sequence[str], timeout_s: float = 2.0) -> float | None:
    """Requests the engine at ``url`` holds (the sum of the dialect's in-system gauges on its /metrics);
    None when unknown (it does not answer, or exports none of them)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as r:
            text = r.read().decode("utf-8", errors="replace")
        found = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name in gauges]
    except (OSError, urllib.error.URLError, ValueError):
        return None
    total = sum(found)
    return total if found and math.isfinite(total) else None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group(proc: subprocess.Popen[bytes], pgid: int, deadline: float) -> bool:
    """True once the leader is reaped and no process of the group is left."""
    while True:
        proc.poll()
        if proc.returncode is not None and not group_alive(pgid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
