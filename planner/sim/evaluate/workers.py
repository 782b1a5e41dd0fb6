"""Worker processes for replays, safe to start from a process that has threads.

A plain fork copies every lock in the state it is in at that instant; a lock another thread held (a
progress bar's refresh, a log pump writing to stdout, an engine client) stays held in the child forever,
and the first worker that touches it hangs the whole pool without an error (e.g. a frontier pool forked
from a test process). The forkserver start method forks each worker from a small server process
that has no other threads, so nothing is inherited mid-use; the workers get their job by pickling (once per
worker, in the pool's initializer).

A process with no other thread forks as before: nothing can be held mid-use, and a caller's script without
an ``if __name__ == "__main__":`` guard keeps working (forkserver and spawn import the main script again in
every worker).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from multiprocessing.context import BaseContext

# Imported once by the fork server, so each worker starts with numpy and the simulator already loaded.
PRELOAD = ["planner.sim.evaluate.backtest", "planner.sim.evaluate.frontier", "planner.sim.evaluate.offline"]


def process_context(threads: int | None = None) -> BaseContext:
    """The context every pool of replays uses: fork when this process runs no other thread (``threads``:
    how many it runs, default now), else forkserver where the platform has it, else spawn."""
    methods = mp.get_all_start_methods()
    if (threads if threads is not None else threading.active_count()) <= 1 and "fork" in methods:
        return mp.get_context("fork")
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return mp.get_context("spawn")
