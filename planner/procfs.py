"""Process groups read from Linux ``/proc`` (empty where there is none): shared by the process actuator's
watchdog (planner/actuators/procwatch.py) and the vLLM test servers (planner/testing/vllm_server.py)."""

from __future__ import annotations

import os


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
