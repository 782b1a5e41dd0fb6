"""How much of the machine other jobs took while something was measured (Linux ``/proc``).

The load average cannot tell: a vLLM CPU server's OpenMP threads spin, so the fidelity harness alone (engine,
API process, client) holds the 1-minute load average at 3-4 on 2 cores with nothing else running. What
matters is the CPU time spent by processes that are not ours: the machine's busy time less that of this
process and its descendants (live, and those they reaped), as a share of all CPUs' time. On a virtual
machine that includes the hypervisor's steal (other machines on the host), reported on its own as well: it
comes in pauses of a fraction of a second that no process in the machine can see coming (docs/fidelity.md,
"Where the TTFT tail comes from: the host, not the engine").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSample:
    busy_ticks: int  # all CPUs since boot, idle and iowait left out
    total_ticks: int
    own_ticks: int  # the process tree under the root: user + system, with its reaped children's
    steal_ticks: int = 0  # time the hypervisor ran other machines on our CPUs (inside busy_ticks)


def _machine_ticks(proc: Path) -> tuple[int, int, int]:
    fields = [int(v) for v in (proc / "stat").read_text().splitlines()[0].split()[1:9]]
    total = sum(fields)  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - fields[3] - fields[4], total, fields[7]


def _processes(proc: Path) -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, user + system + children's user + system ticks)."""
    out: dict[int, tuple[int, int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # it ended between the listing and the read
        rest = text[text.rfind(")") + 2:].split()  # after "pid (comm) ": the name may hold spaces
        out[int(entry.name)] = (int(rest[1]), sum(int(v) for v in rest[11:15]))
    return out


def _tree_ticks(processes: dict[int, tuple[int, int]], root: int) -> int:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in processes:
            total += processes[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def sample(root_pid: int, proc: Path = PROC) -> CpuSample | None:
    """Now, for the tree under ``root_pid``; None where /proc cannot be read (not Linux)."""
    try:
        busy, total, steal = _machine_ticks(proc)
        own = _tree_ticks(_processes(proc), root_pid)
    except (OSError, ValueError, IndexError):
        return None
    return CpuSample(busy, total, own, steal)


def others_share(before: CpuSample | None, after: CpuSample | None) -> float | None:
    """Other jobs' CPU time between the samples (other processes here, and the hypervisor's steal: other
    machines on the same host), as a share of all CPUs' time (0 = ours alone)."""
    if before is None or after is None or after.total_ticks <= before.total_ticks:
        return None
    others = (after.busy_ticks - before.busy_ticks) - (after.own_ticks - before.own_ticks)
    return round(max(0.0, others / (after.total_ticks - before.total_ticks)), 3)


def steal_share(before: CpuSample | None, after: CpuSample | None) -> float | None:
    """The hypervisor's steal alone, as a share of all CPUs' time: while it runs, this whole machine stands
    still (client, API server and engine alike), in bursts of 0.1-1 s."""
    if before is None or after is None or after.total_ticks <= before.total_ticks:
        return None
    return round((after.steal_ticks - before.steal_ticks) / (after.total_ticks - before.total_ticks), 3)


class OthersCpu:
    """``with OthersCpu() as cpu: ...`` then ``cpu.share``: other jobs' share of the machine over the block."""

    def __init__(self, root_pid: int | None = None, proc: Path = PROC) -> None:
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self.proc = proc
        self.share: float | None = None
        self.steal: float | None = None
        self._before: CpuSample | None = None

    def __enter__(self) -> OthersCpu:
        self._before = sample(self.root_pid, self.proc)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        after = sample(self.root_pid, self.proc)
        self.share = others_share(self._before, after)
        self.steal = steal_share(self._before, after)
