"""Process groups read from Linux ``/proc`` (empty where there is none): shared by the process actuator's
watchdog (planner/actuators/procwatch.py) and the vLLM test servers (planner/testing/vllm_server.py); and a
child that ends with the thread that started it (``die_with_parent``)."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` (runs in the child between fork and exec): SIGTERM when the starting thread dies, so a
    helper process does not outlive a parent that was killed without cleaning up."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's own stop() still ends it


def group_members(pgid: int) -> list[tuple[int, str, str]]:
    """(pid, comm, state) of every process in group ``pgid``; a process that ends meanwhile is left out."""
    out: list[tuple[int, str, str]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]  # the name may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid:
            out.append((int(entry), comm, fields[0]))
    return out
