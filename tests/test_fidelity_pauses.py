"""The replay's pause watcher: a stretch where the client's event loop did not run (on a VM, mostly the host
running other machines) marks the requests whose wait for their first token it reached, and the figures over
the others leave them out. Checked on synthetic streams, on a loop blocked on purpose, and through a real
replay against `planner emulate` whose loop is blocked mid-run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from planner.bench.fidelity_load import PAUSE_S, Measured, paused_requests, replay_trace
from planner.profiler.loadgen import LoopLag, StreamResult
from planner.sim.traces.records import RequestTrace
from tests.support.endpoint_fixtures import EmulatorProcess, analytical_profile


def stream(sent_s: float, first_s: float | None) -> StreamResult:
    r = StreamResult(sent_s)
    if first_s is not None:
        r.events_s, r.tokens = [first_s, first_s + 0.1], [1, 2]
    return r


@pytest.mark.parametrize("pause, marked", [
    ((0.0, 0.9), False),  # ended before the request was sent
    ((0.5, 1.2), True),  # began before, ended while it waited
    ((1.1, 1.3), True),  # inside the wait
    ((1.9, 2.5), True),  # began before the first token, ended after it
    ((2.0, 2.5), False),  # after the first token: its ITL, not its TTFT
])
def test_a_pause_marks_the_requests_whose_first_token_it_delayed(pause: tuple[float, float], marked: bool) -> None:
    got = paused_requests([stream(1.0, 2.0), stream(1.0, None)], [pause])
    assert got.tolist() == [marked, False]  # a failed request (no first token) is never marked


def test_the_summary_over_unpaused_requests_leaves_the_marked_ones_out() -> None:
    ttft = np.array([0.05, 0.06, 2.0, 0.07])
    m = Measured(ttft, np.full(4, 0.01), np.zeros(4, dtype=bool), [], 1.0, paused=np.array([False, False, True, False]))
    assert m.summary()["ttft_p95_ms"] > 1000
    assert m.unpaused_summary()["ttft_p95_ms"] == pytest.approx(np.percentile([50, 60, 70], 95))
    assert Measured(ttft, np.full(4, 0.01), np.zeros(4, dtype=bool), [], 1.0).unpaused_summary() == m.summary()


def test_the_watcher_sees_a_blocked_loop_and_only_that() -> None:
    async def run() -> tuple[LoopLag, float, float]:
        with LoopLag() as lag:
            await asyncio.sleep(0.05)
            blocked_at = time.perf_counter()
            time.sleep(0.2)  # the loop cannot run: what a stopped machine looks like from inside
            unblocked_at = time.perf_counter()
            await asyncio.sleep(0.05)
        return lag, blocked_at, unblocked_at

    lag, blocked_at, unblocked_at = asyncio.run(run())
    (pause,) = lag.pauses(PAUSE_S)
    assert pause[0] <= blocked_at + 0.01 and pause[1] >= unblocked_at
    assert pause[1] - pause[0] >= 0.19  # the watcher's own 5 ms sleep may overlap the block's start


@pytest.mark.slow
def test_a_replay_marks_what_a_blocked_client_delayed(tmp_path: Path) -> None:
    """Twenty requests 50 ms apart against the emulator slowed 30x, so each waits longer than the gap for its
    first token; when the first one ends, the client's loop blocks for 0.4 s. The requests waiting for their
    first token then are marked (the overlap rule itself is checked above, case by case)."""
    profile_path = tmp_path / "served.json"
    analytical_profile("qwen3-0.6b", (1,), profile_path)
    n = 20
    trace = RequestTrace(np.arange(n) * 0.05, np.full(n, 2048, dtype=np.int64), np.full(n, 4, dtype=np.int64), "test")
    blocked: list[float] = []

    def on_done(done: int) -> None:
        if not blocked:
            blocked.append(time.perf_counter())
            time.sleep(0.4)

    with EmulatorProcess(profile_path, time_scale=30.0, model_name="tiny", max_model_len=4096) as emu:
        emu.wait_ready()
        measured = replay_trace(emu.url, trace, vocab=4096, on_done=on_done)
    assert not measured.failed.any(), measured.errors
    assert measured.paused is not None and measured.paused.sum() >= 1, measured.paused
    # Nothing is sent or received while the loop is blocked: a request marked by the block was sent before it
    # and got its first token after it, so it waited the whole 0.4 s at least. (Other marks may come from
    # real stalls of a busy machine, over 50 ms: they are what the watcher is for.)
    assert measured.ttft_s[measured.paused].max() >= 0.4
