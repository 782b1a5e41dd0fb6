"""No scale-down into a rising load (behavior.rise_hold, reason rate_rising).

The hedge's scale-down window asks only that the recommendations were low for its length: at the end of a lull
longer than the window, the tick a burst starts still recommends the lull's size, and a pool given back then
meets the burst short (Azure code x30 on Qwen3-32B: decode 2 -> 1 as the rate went 49 -> 467 req/s, 86.00 %
joint attainment; held, 94.47 % on fewer GPU-hours; README, "No scale-down into a rising load").
``planner/forecast/burst.py`` ``rate_rise`` reads the rise, beyond counting noise; the controller passes it in
the LoadForecast; ``recommend()`` holds every pool's size on such a tick. Pure, time an argument.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from planner.decide import decide
from planner.decide.behavior import recommend
from planner.decide.state import PlannerState, PoolMemory
from planner.errors import UserError
from planner.forecast.burst import RISE_Z, rate_rise
from planner.policy_file import parse_policy
from planner.types import Reason
from tests.support.decide_support import drive, example_data, load_forecast, merge, observation, policy, spec

WINDOW_S, STEP_S = 60.0, 30.0


@pytest.mark.parametrize("times, rates, expected", [
    pytest.param([0.0, 30.0], [30.0, 45.0], 0.5, id="half-again"),
    pytest.param([0.0, 30.0], [30.0, 120.0], 3.0, id="fourfold"),
    pytest.param([0.0, 30.0], [40.0, 20.0], 0.0, id="falling"),
    # sd of two half-overlapping 60 s windows at 30 req/s: sqrt(2 x 30 x 30) / 60 = 0.71 req/s; 2 req/s is within 3
    pytest.param([0.0, 30.0], [30.0, 32.0], 0.0, id="within-counting-noise"),
    pytest.param([0.0, 30.0], [30.0, 33.0], 0.1, id="just-beyond-counting-noise"),
    # from nothing: the earlier rate counts as one request per window (1/60 req/s), so the share stays finite
    pytest.param([0.0, 30.0], [0.0, 1.0], 60.0, id="from-zero"),
    pytest.param([0.0, 90.0], [10.0, 40.0], None, id="reads-too-far-apart"),
    pytest.param([30.0], [10.0], None, id="one-read"),
    pytest.param([0.0, 30.0], [math.nan, 40.0], None, id="a-nan-read"),
    pytest.param([0.0, 30.0], [10.0, -1.0], None, id="a-negative-read"),
])
def test_rate_rise_reads_the_last_two_reads(times, rates, expected) -> None:
    got = rate_rise(times, rates, WINDOW_S, max_gap_s=2 * STEP_S)
    assert got == (None if expected is None else pytest.approx(expected))


def test_rate_rise_rejects_a_bad_window() -> None:
    with pytest.raises(ValueError, match="window_s"):
        rate_rise([0.0, 30.0], [1.0, 2.0], 0.0, 60.0)


def _overlapping_reads(arrivals: list[float], until_s: float) -> tuple[list[float], list[float]]:
    """The rate over the last WINDOW_S, read every STEP_S (as the controller reads Prometheus)."""
    times = [WINDOW_S + STEP_S * k for k in range(int((until_s - WINDOW_S) // STEP_S) + 1)]
    rates = [sum(1 for a in arrivals if t - WINDOW_S < a <= t) / WINDOW_S for t in times]
    return times, rates


def _poisson(rate_at, until_s: float, seed: int) -> list[float]:
    """Arrivals of a Poisson process whose rate is piecewise constant (thinning at the largest rate)."""
    rng, top, t, out = random.Random(seed), 200.0, 0.0, []
    while True:
        t += rng.expovariate(top)
        if t > until_s:
            return out
        if rng.random() < rate_at(t) / top:
            out.append(t)


def test_steady_poisson_load_seldom_reads_as_rising_and_a_burst_does_at_once() -> None:
    """The fact the measure models: counting noise between half-overlapping windows. At RISE_Z = 3 steady load
    reads as rising (any share) on well under 1 % of reads; a burst from 20 to 120 req/s reads at once."""
    until_s = 4 * 3600.0
    times, rates = _overlapping_reads(_poisson(lambda t: 30.0, until_s, seed=1), until_s)
    rises = [rate_rise(times[: i + 1], rates[: i + 1], WINDOW_S, 2 * STEP_S) for i in range(1, len(times))]
    rising = sum(1 for r in rises if r and r > 0)
    assert RISE_Z == 3.0 and len(rises) > 400
    assert rising / len(rises) < 0.01
    assert all(r is not None and r < 0.5 for r in rises)  # never past the example's rise_hold
    burst_s = 600.0
    times, rates = _overlapping_reads(_poisson(lambda t: 20.0 if t < burst_s else 120.0, 900.0, seed=2), 900.0)
    first = times.index(burst_s + STEP_S)  # the first read whose window holds burst time
    assert rate_rise(times[: first + 1], rates[: first + 1], WINDOW_S, 2 * STEP_S) > 1.0


NOW_S = 3600.0


def _lull_state() -> PlannerState:
    """Both pools asked for 2 replicas for the last 10 minutes after asking 6 (prefill) and 3 (decode): the hedge's
    240 s window is over, so each may give one replica back this tick."""
    def asked(high: int) -> PoolMemory:
        history = tuple((NOW_S - 900.0 - 30.0 * k, high) for k in range(4)) + tuple(
            (NOW_S - 30.0 * k, 2) for k in range(1, 20))
        return PoolMemory(target=high, recommendations=history)
    return PlannerState(pools={"prefill": asked(6), "decode": asked(3)})


@pytest.mark.parametrize("allow_down, rising, replicas, reason", [
    pytest.param(True, False, {"prefill": 5, "decode": 2}, None, id="steady-gives-one-back"),
    pytest.param(True, True, {"prefill": 6, "decode": 3}, Reason.RATE_RISING, id="rising-holds-every-pool"),
    pytest.param(False, True, {"prefill": 6, "decode": 3}, Reason.NO_DATA_HOLD, id="no-data-says-so-first"),
])
def test_a_rising_tick_gives_nothing_back(allow_down: bool, rising: bool, replicas: dict, reason) -> None:
    why = {"prefill": (Reason.SLA_CAPACITY,), "decode": (Reason.SLA_CAPACITY,)}
    obs = observation(NOW_S, 10.0, ready={"prefill": 6, "decode": 3})
    out = recommend(policy(), {"prefill": 2, "decode": 2}, why, {"prefill": allow_down, "decode": allow_down},
                    _lull_state(), obs, NOW_S, rate_rising=rising)
    assert {p: r.replicas for p, r in out.items()} == replicas
    for r in out.values():
        assert (reason in r.reasons) if reason else not ({Reason.RATE_RISING, Reason.NO_DATA_HOLD} & set(r.reasons))
    if reason is Reason.NO_DATA_HOLD:
        assert all(Reason.RATE_RISING not in r.reasons for r in out.values())


@pytest.mark.parametrize("rise_hold, rise, held", [
    pytest.param(0.5, 3.0, True, id="fourfold-past-0.5"),
    pytest.param(0.5, 0.5, False, id="at-the-threshold-gives-back"),
    pytest.param(0.5, 0.0, False, id="within-noise"),
    pytest.param(0.5, None, False, id="unknown-holds-nothing"),
    pytest.param(None, 3.0, False, id="off"),
])
def test_decide_holds_on_a_rise_past_rise_hold(rise_hold, rise, held) -> None:
    pol = policy(behavior={"rise_hold": rise_hold})
    forecast = replace(load_forecast(10.0), rate_rise=rise)
    obs = observation(NOW_S, 10.0, ready={"prefill": 6, "decode": 3})
    d, _ = decide(spec(pol), obs, forecast, _lull_state(), NOW_S)
    assert (d.pools["prefill"].replicas == 6) == held
    assert (Reason.RATE_RISING in d.reasons) == held
    assert d.detail.get("rate_rise") == rise


def test_the_controller_reads_the_rise_from_its_history() -> None:
    """A lull of 10 req/s for 10 minutes, then a fourfold burst: the burst's first tick reads rate_rise 3 and
    holds every pool (the plant reports exact rates); with rise_hold null nothing is read."""
    rates = lambda t: 10.0 if t <= 600.0 else 40.0  # noqa: E731
    on = drive(policy(), rates, hours=0.25, initial={"prefill": 4, "decode": 2})
    burst = next(i for i, d in enumerate(on) if d.at_s > 600.0)
    assert on[burst].detail["rate_rise"] == pytest.approx(3.0)
    assert on[burst - 1].detail["rate_rise"] == 0.0 and on[burst + 1].detail["rate_rise"] == 0.0
    off = drive(policy(behavior={"rise_hold": None}), rates, hours=0.25, initial={"prefill": 4, "decode": 2})
    assert all("rate_rise" not in d.detail for d in off)


@pytest.mark.parametrize("value", [0, -0.5, "fast"])
def test_a_bad_rise_hold_names_the_key(value) -> None:
    with pytest.raises(UserError, match=r"behavior\.rise_hold"):
        parse_policy(merge(example_data(), {"behavior": {"rise_hold": value}}), "p.yaml")


def test_the_example_holds_on_a_rise_of_half() -> None:
    assert example_data()["behavior"]["rise_hold"] == 0.5
