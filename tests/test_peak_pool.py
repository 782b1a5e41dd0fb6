"""The static pool sized at a model's peak (sim/evaluate/peak_pool.py): the busiest window it is sized on, the
smallest pool meeting the SLA there, and a yardstick no autoscaler's behaviour moves."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from planner.bench.scenarios import EXAMPLE_POLICY
from planner.fleet_file import FleetMember
from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.evaluate.fleet_backtest import _static_replay
from planner.sim.evaluate.peak_pool import LEAD_S, PEAK_WINDOW_S, busiest_window, peak_pool
from planner.sim.evaluate.replay import Replay
from planner.sim.evaluate.scoring import summarise
from planner.sim.traces.records import RequestTrace

POLICY = load_policy(EXAMPLE_POLICY)
PROFILE = load_profile(EXAMPLE_POLICY.parent.parent / POLICY.profile)


def _poisson(rate_rps: float, start_s: float, end_s: float, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.uniform(start_s, end_s, rng.poisson(rate_rps * (end_s - start_s))))


def _trace(steps: list[tuple[float, float, float]], seed: int = 0) -> RequestTrace:
    """Poisson arrivals at each (rate, start, end); 1,000-token prompts, 200-token answers."""
    rng = np.random.default_rng(seed)
    t = np.sort(np.concatenate([_poisson(r, a, b, rng) for r, a, b in steps]))
    return RequestTrace(t, np.full(len(t), 1000), np.full(len(t), 200), "synthetic")


def _member(**update: object) -> FleetMember:
    return FleetMember(POLICY.model_copy(update=update) if update else POLICY, PROFILE, 0, Path(EXAMPLE_POLICY))


def _runner(m: FleetMember, calls: list[Mapping[str, int]]):
    def run(tr: RequestTrace, targets: Mapping[str, int], gpus: Mapping[str, int], since_s: float) -> Replay:
        calls.append(dict(targets))
        return _static_replay(m, tr, targets, gpus, m.policy.interval_s, None, False, since_s)
    return run


@pytest.mark.parametrize(("steps", "since_s", "expected_start"), [
    ([(1.0, 0, 3600), (5.0, 2000, 2600)], 0.0, 2000.0),  # the burst
    ([(1.0, 0, 3600), (9.0, 100, 700), (5.0, 2000, 2600)], 600.0, 2000.0),  # a bigger one before since_s: not scored
    ([(1.0, 0, 3600), (5.0, 3300, 3600)], 0.0, 3000.0),  # a burst at the end: the window holding all of it
])
def test_the_busiest_window_is_the_one_with_most_arrivals_after_since(steps, since_s, expected_start) -> None:
    start, end = busiest_window(_trace(steps), since_s)
    assert end - start == pytest.approx(PEAK_WINDOW_S)
    assert start >= since_s and start == pytest.approx(expected_start, abs=15.0)


def test_the_pool_is_the_smallest_that_meets_the_sla_over_the_peak() -> None:
    """A 10-minute step from 5 to 25 req/s: the pool meets the SLA over the step, one replica fewer in any pool
    above its floor does not, and held all run it meets the SLA over the run too."""
    m, calls = _member(), []
    trace = _trace([(5.0, 0, 3000), (20.0, 1500, 2100)])
    run = _runner(m, calls)
    found = peak_pool(m, trace, 600.0, run)
    assert found.window_s[0] == pytest.approx(1500.0, abs=5.0)
    assert found.attainment is not None and found.attainment >= 0.95
    assert found.replays == len(calls) and found.targets["prefill"] > 1  # the step needs more than one
    peak = trace.window(found.window_s[0] - LEAD_S, found.window_s[1])
    for pool, n in found.targets.items():
        if n > 1:
            fewer = {**found.targets, pool: n - 1}
            att = summarise(run(peak, fewer, found.gpus, found.window_s[0]), m.policy, found.window_s[1])
            assert att["attainment_joint"] < 0.95, (pool, fewer)
    whole = summarise(run(trace, found.targets, found.gpus, 600.0), m.policy, trace.duration_s)
    assert whole["attainment_joint"] >= 0.95


def test_no_autoscaler_setting_moves_it() -> None:
    """The yardstick reads the SLA, the profile and the trace: a policy that forecasts, hedges and calibrates
    differently gets the same pool (the fleet's yardstick was the peak its own planner reached)."""
    trace = _trace([(5.0, 0, 3000), (20.0, 1500, 2100)])
    shipped, other = _member(), _member(forecast=POLICY.forecast.model_copy(update={"quantile": 0.99,
                                                                                      "model": "ewma"}),
                                        calibration=POLICY.calibration.model_copy(update={"enabled": False}))
    a = peak_pool(shipped, trace, 600.0, _runner(shipped, []))
    b = peak_pool(other, trace, 600.0, _runner(other, []))
    assert a.targets == b.targets and a.attainment == b.attainment


def test_a_pool_no_size_can_serve_stops_at_its_ceilings() -> None:
    """A 60 ms TTFT target no prefill meets for 1,000-token prompts: the search grows to the ceilings and says
    the window's attainment, never loops."""
    m = _member(sla=POLICY.sla.model_copy(update={"ttft_ms": 60.0}),
                pools=POLICY.pools.model_copy(update={
                    "prefill": POLICY.pools.prefill.model_copy(update={"max_replicas": 3}),
                    "decode": POLICY.pools.decode.model_copy(update={"max_replicas": 2})}))
    found = peak_pool(m, _trace([(5.0, 0, 1800)]), 600.0, _runner(m, []))
    assert found.targets == {"prefill": 3, "decode": 2}
    assert found.attainment is not None and found.attainment < 0.95
