"""Worker pools for replays start cleanly from a process with threads (CI hung once on a forked pool)."""

from __future__ import annotations

import _strptime
import multiprocessing as mp
import threading
import time

import pytest

from planner.sim.evaluate.workers import process_context


def _parse_in_pool(ctx, wait_s: float) -> time.struct_time:
    """time.strptime takes _strptime's module lock, which nothing re-creates after a fork."""
    with ctx.Pool(1) as pool:
        try:
            return pool.starmap_async(time.strptime, [("2024", "%Y")]).get(timeout=wait_s)[0]
        finally:
            pool.terminate()


@pytest.fixture
def lock_held_by_a_thread():
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _strptime._cache_lock:
            held.set()
            release.wait(120)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    held.wait(10)
    yield
    release.set()
    t.join(10)


def test_a_plain_fork_inherits_the_held_lock_and_hangs(lock_held_by_a_thread) -> None:
    # The control: the hazard is real here, so the next test means something.
    with pytest.raises(mp.TimeoutError):
        _parse_in_pool(mp.get_context("fork"), wait_s=3.0)


def test_the_replay_pool_does_not_inherit_it(lock_held_by_a_thread) -> None:
    assert _parse_in_pool(process_context(), wait_s=90.0).tm_year == 2024


def test_a_plain_fork_only_where_no_other_thread_runs(lock_held_by_a_thread) -> None:
    assert threading.active_count() > 1
    assert process_context().get_start_method() in ("forkserver", "spawn")
    assert process_context(threads=2).get_start_method() in ("forkserver", "spawn")
    # A single-threaded caller keeps fork: its script needs no __main__ guard, and nothing can be held.
    assert process_context(threads=1).get_start_method() == "fork"
