"""Scale to zero in the simulator: a sparse policy sleeps between busy windows; the first request after it wakes
the policy at once (the router's wake signal) or, without the signal, at the next tick; the requests wait at the
router for the cold start (counted in their TTFT, never dropped) up to the router's hold timeout, past which
they fail and are counted; the fleet report counts the wakes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from planner.fleet_file import load_fleet
from planner.sim.evaluate.fleet_backtest import run_fleet_backtest
from planner.sim.traces.loaders import load_requests
from planner.sim.traces.records import RequestTrace
from tests.support.fleet_support import member, write_fleet

TRACE = Path(__file__).resolve().parents[1] / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
STARTUP_S = 60.0
ZERO = {"pools": {"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 0}}, "scale_to_zero_after_s": 60,
        "startup_s": STARTUP_S}


def _busy_gap_busy() -> RequestTrace:
    base = load_requests(TRACE, "azure", rate_scale=0.5, duration_s=1500)
    keep = (base.arrival_s < 300) | ((base.arrival_s >= 907) & (base.arrival_s < 1300))  # 907: off the 30 s grid
    return RequestTrace(base.arrival_s[keep], base.isl[keep], base.osl[keep], base.source)


@pytest.mark.parametrize(("wake", "hold_timeout_s"), [(True, 300.0), (False, 300.0), (True, 30.0)],
                         ids=["wake-at-once", "wake-at-next-tick", "hold-timeout-below-startup"])
def test_a_sparse_policy_sleeps_and_its_first_requests_wait_for_the_cold_start(tmp_path: Path, wake: bool,
                                                                               hold_timeout_s: float) -> None:
    fleet = load_fleet(write_fleet(tmp_path, [member("sparse", 0, **ZERO)], max_gpus=16))
    trace = _busy_gap_busy()
    result = run_fleet_backtest(fleet, {"sparse": trace}, compare=False, wake=wake, hold_timeout_s=hold_timeout_s)
    p = result.report["policies"]["sparse"]
    slept = result.shared.asleep["sparse"]
    first_s = float(trace.arrival_s[trace.arrival_s >= 900][0])
    interval_s = fleet.interval_s
    assert len(slept) == 1 and 300 < slept[0][0] < 900
    woke_s = slept[0][1]
    next_tick_s = (first_s // interval_s + 1) * interval_s
    # the first request after the gap wakes it: at its arrival with the signal, at the next grid point without
    assert woke_s == pytest.approx(first_s, abs=0.01) if wake else woke_s == next_tick_s
    assert p["cold_starts"]["wakes"] == 1 and result.report["fleet"]["cold_starts"] == 1
    assert p["requests"] == len(trace)  # nothing dropped: every request is served or counted as failed
    res = result.shared.replays["sparse"].results
    arrival, ttft, failed = res["arrival_s"], res["ttft_s"], res["failed"]
    ready_s = woke_s + STARTUP_S
    held_too_long = (arrival >= 900) & (ready_s - arrival > hold_timeout_s)
    assert np.array_equal(failed, held_too_long)  # exactly those held past the router's timeout fail
    assert p["failed_requests"] == int(held_too_long.sum()) and (held_too_long.any() == (hold_timeout_s < 60))
    first = arrival == first_s
    if not failed[first][0]:  # its TTFT is the wait for the replicas' start-up, plus the tick's delay without a wake
        assert ready_s - first_s <= ttft[first][0] < ready_s - first_s + 5
    warm = arrival < 300
    assert p["cold_starts"]["ttft_ms_p95"] > 10 * float(np.nanpercentile(ttft[warm] * 1e3, 95))


def test_a_wake_moves_only_the_policy_it_wakes(tmp_path: Path) -> None:
    """The wake's tick is off the grid for the sleeping policy alone: a busy policy beside it decides on the grid
    only, as it would without the wake (its windows, rates and stabilization are read on the grid)."""
    fleet = load_fleet(write_fleet(tmp_path, [member("sparse", 0, **ZERO), member("busy", 10)], max_gpus=32))
    busy = load_requests(TRACE, "azure", rate_scale=0.5, duration_s=1500)
    traces = {"sparse": _busy_gap_busy(), "busy": busy}
    woken = run_fleet_backtest(fleet, traces, compare=False, wake=True).shared
    at_grid = run_fleet_backtest(fleet, traces, compare=False, wake=False).shared
    interval_s = fleet.interval_s
    sparse_at = [t for t, _ in woken.replays["sparse"].targets]
    assert any(t % interval_s for t in sparse_at)  # the sparse policy woke off the grid
    busy_at = [t for t, _ in woken.replays["busy"].targets]
    assert busy_at and all(t % interval_s == 0 for t in busy_at)
    # ... and decided exactly what it decides when nothing wakes off the grid
    assert woken.replays["busy"].targets == at_grid.replays["busy"].targets


@pytest.mark.parametrize("wake", [True, False], ids=["wake-at-once", "wake-at-next-tick"])
def test_a_single_policy_replay_wakes_at_the_first_request_too(tmp_path: Path, wake: bool) -> None:
    """`planner backtest` of one policy that scales to zero: the router's wake ticks it at the first request after
    the gap (off the grid, which goes on where it was), as in a fleet; without the signal, at the next tick."""
    from planner.controller import make_planner_controller
    from planner.sim.evaluate.backtest import sim_setup
    from planner.sim.evaluate.replay import replay

    m = load_fleet(write_fleet(tmp_path, [member("sparse", 0, **ZERO)])).member("sparse")
    trace = _busy_gap_busy()
    ctx, cfg = sim_setup(trace, m.profile, m.policy, startup_s=None, kill=False)
    controller = make_planner_controller(m.policy, m.profile, None, dict(ctx.initial))
    rep = replay(trace, m.profile, controller, cfg, ctx.initial, ctx.window_s, wake=wake)
    interval_s = m.policy.interval_s
    first_s = float(trace.arrival_s[trace.arrival_s >= 900][0])
    asleep = [t for t, tg in rep.targets if 300 < t < first_s and not any(tg.values())]
    woke_s = next(t for t, tg in rep.targets if t >= first_s and any(tg.values()))
    assert asleep  # it slept through the gap
    assert woke_s == (pytest.approx(first_s, abs=0.01) if wake else (first_s // interval_s + 1) * interval_s)
    off_grid = [t for t, _ in rep.targets if t % interval_s]
    assert off_grid == ([woke_s] if wake else [])  # the grid went on where it was
    assert rep.failed == 0 and int(np.isfinite(rep.results["ttft_s"]).sum()) == len(trace)


def test_a_full_hold_queue_refuses_the_next_request_at_once(tmp_path: Path) -> None:
    """`planner route --hold-queue N` in the simulator: while N requests wait for the cold start, the next ones
    fail (the router's 503), counted; those held are served once the replicas are ready."""
    fleet = load_fleet(write_fleet(tmp_path, [member("sparse", 0, **ZERO)], max_gpus=16))
    trace = _busy_gap_busy()
    bounded = run_fleet_backtest(fleet, {"sparse": trace}, compare=False, hold_queue=3)
    slept, woke = bounded.shared.asleep["sparse"][0]
    res = bounded.shared.replays["sparse"].results
    arrival, failed = res["arrival_s"], res["failed"]
    during = np.flatnonzero((arrival >= 900) & (arrival < woke + STARTUP_S))  # arrived before a replica was ready
    assert len(during) > 3
    assert not failed[during[:3]].any() and failed[during[3:]].all()  # three held, the rest refused
    assert not failed[arrival >= woke + STARTUP_S + 1].any()
    unbounded = run_fleet_backtest(fleet, {"sparse": trace}, compare=False).shared.replays["sparse"]
    assert unbounded.failed == 0 and bounded.shared.replays["sparse"].failed == len(during) - 3


def test_cold_starts_count_each_request_once_where_sleeps_overlap_a_start() -> None:
    """A policy that slept again while its woken replicas still started: the two spans' cold windows overlap,
    and a request in both is still one cold start."""
    from planner.sim.evaluate.fleet_replay import FleetReplay
    from planner.sim.evaluate.replay import Replay

    arrival = np.array([10.0, 95.0, 130.0, 400.0])
    results = {"arrival_s": arrival, "ttft_s": np.array([0.5, 60.0, np.nan, 0.4]),
               "failed": np.array([False, False, True, False])}
    rep = Replay("p", results, [], 0.0, 400.0, 0, [], 1)
    fr = FleetReplay("fleet", 8, {"p": rep}, [], [], {"p": 0}, 0, 2, 0.0, {"p": [(60.0, 80.0), (100.0, 110.0)]})
    # cold windows [60, 80 + 120) and [100, 110 + 120): 95 and 130 arrived in them, 130 in both
    assert fr.cold_ttft_ms("p", 120.0) == [60_000.0, math.inf]



def test_the_engines_ttft_starts_when_the_router_dispatches_a_held_request(tmp_path: Path) -> None:
    """What the controller reads is what the engines' TTFT histograms count: from when an engine received the
    request. A request held at the router through a cold start reaches an engine once a replica is ready, so its
    wait is in the client's TTFT (the scores) and not in the metric source's (calibration, the error budget),
    as live, where vLLM times a request from its own arrival."""
    from planner.sim.cluster.cluster import Cluster
    from planner.sim.cluster.metrics import SimMetricSource
    from planner.sim.evaluate.backtest import sim_setup

    m = load_fleet(write_fleet(tmp_path, [member("sparse", 0, **ZERO)])).member("sparse")
    trace = _busy_gap_busy()
    _, cfg = sim_setup(trace, m.profile, m.policy, startup_s=None, kill=False)
    cluster = Cluster(trace, m.profile, cfg, {"prefill": 0, "decode": 0})  # asleep from the start
    woke_s = 60.0
    cluster.run_until(woke_s)
    assert cluster.held() > 3  # the router holds what arrived meanwhile
    cluster.apply({"prefill": 1, "decode": 1})  # ready at woke_s + the start-up
    ready_s = woke_s + STARTUP_S
    cluster.run_until(ready_s + 30.0)
    res = cluster.results()
    arrival, ttft, first = res["arrival_s"], res["ttft_s"], res["first_s"]
    held = arrival < ready_s
    assert np.isfinite(ttft[held]).all() and (ttft[held] >= ready_s - arrival[held] - 1e-9).all()  # the client waited
    assert np.allclose(np.asarray(cluster.log.dispatched_s)[held], ready_s)
    assert np.array_equal(np.asarray(cluster.log.dispatched_s)[~held], arrival[~held])
    now_s = ready_s + 30.0
    engine_ms = SimMetricSource(cluster).ttfts_ms(now_s, now_s)  # every first token so far
    served = np.isfinite(first) & (first <= now_s)
    assert len(engine_ms) == int(served.sum())
    # Each held request's engine TTFT is its client TTFT less its wait at the router; the others' are the same.
    expected_ms = (first[served] - np.where(held[served], ready_s, arrival[served])) * 1e3
    assert np.allclose(np.sort(engine_ms), np.sort(expected_ms))
    assert (ttft[served] * 1e3 - expected_ms)[held[served]].min() > 0  # every held one waited at the router
