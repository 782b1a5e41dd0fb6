"""Other jobs' share of the machine: the CPU time of processes outside ours, from /proc. Checked on a fake
/proc (the arithmetic) and on this machine's own (a busy child is ours; a busy process handed to init is not)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.bench.machine_share import CpuSample, OthersCpu, others_share, sample, steal_share

ON_LINUX = Path("/proc/stat").exists()


def fake_proc(root: Path, cpu: tuple[int, ...], processes: dict[int, tuple[str, int, tuple[int, int, int, int]]]) -> Path:
    """A /proc with a stat line and, per pid, (comm, parent pid, (utime, stime, cutime, cstime))."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text("cpu  " + " ".join(map(str, cpu)) + " 0 0\ncpu0 1 2 3\n")
    for pid, (comm, parent, ticks) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        before = ["S", str(parent)] + ["0"] * 9  # state, ppid, pgrp ... cmajflt
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(before + list(map(str, ticks))) + " 20 0\n")
    (root / "self").mkdir(exist_ok=True)  # not a pid: ignored
    return root


@pytest.mark.parametrize("comm", ["python", "vllm (engine) 2", "a) b"])
def test_the_tree_under_the_root_is_ours_and_the_rest_is_not(tmp_path: Path, comm: str) -> None:
    procs = {1: ("init", 0, (5, 5, 0, 0)), 100: (comm, 1, (10, 2, 3, 1)), 101: ("child", 100, (7, 1, 0, 0)),
             102: ("grandchild", 101, (4, 0, 0, 0)), 200: ("other job", 1, (50, 50, 0, 0))}
    got = sample(100, fake_proc(tmp_path / "proc", (90, 0, 20, 870, 0, 0, 0, 20), procs))
    assert got == CpuSample(busy_ticks=130, total_ticks=1000, own_ticks=16 + 8 + 4, steal_ticks=20)


@pytest.mark.parametrize("before, after, expected", [
    (CpuSample(100, 1000, 10), CpuSample(300, 2000, 110), 0.1),  # 200 busy, 100 ours: others 100 of 1000
    (CpuSample(100, 1000, 10), CpuSample(200, 2000, 110), 0.0),  # all ours
    (CpuSample(100, 1000, 10), CpuSample(200, 2000, 140), 0.0),  # ours counted more than the machine: clipped
    (CpuSample(100, 1000, 10), CpuSample(100, 1000, 10), None),  # no time passed
    (None, CpuSample(100, 1000, 10), None),
])
def test_others_share_is_busy_time_less_ours_over_all_cpu_time(before: CpuSample | None, after: CpuSample,
                                                               expected: float | None) -> None:
    assert others_share(before, after) == expected


def test_steal_is_the_hypervisors_share_of_all_cpu_time() -> None:
    assert steal_share(CpuSample(100, 1000, 10, 5), CpuSample(400, 2000, 110, 175)) == 0.17
    assert steal_share(CpuSample(100, 1000, 10, 5), CpuSample(100, 1000, 10, 5)) is None


def test_without_proc_there_is_no_figure(tmp_path: Path) -> None:
    assert sample(1, tmp_path / "missing") is None
    with OthersCpu(proc=tmp_path / "missing") as cpu:
        pass
    assert cpu.share is None and cpu.steal is None


# Spins until it has had {s} s of CPU, however long a busy machine makes that take (a wall-clock spin of 1.5 s
# got 0.94 s of CPU beside another pytest worker: CI, 2026-12-01).
BUSY = "import time\nwhile time.process_time() < {s}: pass\n"


@pytest.mark.timing  # measures the machine's CPU shares: .ci/run's quiet phase
@pytest.mark.skipif(not ON_LINUX, reason="needs Linux /proc")
def test_a_busy_child_is_ours_and_a_busy_stranger_is_not() -> None:
    """1.5 s of one core's CPU: as our child it adds to our own ticks; double-forked (its parent gone, so it
    belongs to init) it is another job's, at least 0.6 of one core's share of the machine while we sleep 1.5 s."""
    cores = os.cpu_count() or 1
    before = sample(os.getpid())
    subprocess.run([sys.executable, "-c", BUSY.format(s=1.5)], check=True)
    after = sample(os.getpid())
    assert before is not None and after is not None
    assert after.own_ticks - before.own_ticks >= 0.8 * 1.5 * os.sysconf("SC_CLK_TCK")
    stranger = ("import os, sys, time\nif os.fork(): sys.exit(0)\n" + BUSY.format(s=1.5))
    with OthersCpu() as cpu:
        subprocess.run([sys.executable, "-c", stranger], check=True)  # returns at once; its child runs on
        time.sleep(1.5)
    assert cpu.share is not None and cpu.share >= 0.6 / cores, cpu.share
