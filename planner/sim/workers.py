"""Worker processes for replays, safe to start from a process that has threads.

A plain fork copies every lock in the state it is in at that instant; a lock another thread held (a
progress bar's refresh, a log pump writing to stdout, an engine client) stays held in the child forever,
and the first worker that touches it hangs the whole pool without an error. The forkserver start method
forks each worker from a small server process that has no other threads, so nothing is inherited mid-use.
Workers get their job by pickling (once per worker, in the pool's initializer), not by sharing memory.
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.context import BaseContext

# Imported once by the fork server, so each worker starts with numpy and the simulator already loaded.
PRELOAD = ["planner.sim.backtest", "planner.sim.frontier", "planner.sim.offline"]


def process_context() -> BaseContext:
    """The context every pool of replays uses: forkserver where the platform has it, else spawn."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return mp.get_context("spawn")
