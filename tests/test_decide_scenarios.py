"""The planner controller stepped through hours of load on a FakeClock against a toy plant."""

from __future__ import annotations

import math
import random

import pytest

from planner.controller import HistoryForecast, PlannerController, make_planner_controller
from planner.decide import decide
from planner.errors import UserError
from planner.types import NoData, NoDataReason, Reason
from tests.support.decide_support import (
    PROFILE,
    direction_changes_per_hour,
    drive,
    free_policy,
    load_forecast,
    observation,
    policy,
    spec,
)

BIG = {"pools": {"prefill": {"max_replicas": 200}, "decode": {"max_replicas": 60}}}
POL = policy(**BIG)


def sized(rate: float) -> dict[str, int]:
    d, _ = decide(spec(free_policy()), observation(0, rate), load_forecast(rate), None, 0.0)
    return d.targets()


def test_step_up_reaches_the_sla_size_within_the_rate_limits() -> None:
    decisions = drive(POL, lambda t: 10.0 if t < 1800 else 200.0, hours=1.0)
    need = sized(200.0)
    assert decisions[89].targets() == need  # 15 min after the step (decision i is at t = 30 (i + 1) s)
    assert decisions[58].targets() == sized(10.0)  # the last tick before it
    # Percent policy 100 %/30 s: prefill doubles at most once per period on the way up.
    ups = [d for d in decisions if Reason.SCALE_UP_LIMIT in d.pools["prefill"].reasons]
    assert ups, "a 20x step must hit the scale-up rate limit"
    assert max(d.targets()["prefill"] for d in decisions) == need["prefill"]  # never overshoots


def test_spike_scales_up_then_down_slowly() -> None:
    decisions = drive(POL, lambda t: 300.0 if 600 <= t < 720 else 10.0, hours=1.5)
    prefill = [d.targets()["prefill"] for d in decisions]
    peak = max(prefill)
    assert sized(300.0)["prefill"] // 2 <= peak <= 2 * sized(300.0)["prefill"]
    # The window (240 s by default: 8 intervals) holds the pool after the last recommendation that needed it.
    hold = int(POL.behavior.scale_down.stabilization_window_s // POL.interval_s)
    assert hold == 8
    high = max(i for i, d in enumerate(decisions) if d.pools["prefill"].desired_unclamped >= peak)
    assert all(n == peak for n in prefill[high: high + hold])
    assert prefill[high + hold + 1] < peak  # and no longer: one pod per 60 s from then on
    assert any(Reason.SCALE_DOWN_STABILIZED in d.pools["prefill"].reasons for d in decisions[high + 1: high + hold])
    downs = [b - a for a, b in zip(prefill, prefill[1:], strict=False)]
    assert min(downs) >= -1, "scale-down is limited to 1 pod per 60 s"
    assert prefill[-1] < peak


def test_ramp_down_then_idle_reaches_the_floors() -> None:
    fast_down = policy(**BIG, behavior={"scale_down": {"stabilization_window_s": 60,
                                                       "policies": [{"type": "percent", "value": 50, "period_s": 60}]}})
    decisions = drive(fast_down, lambda t: max(0.0, 300.0 * (1 - t / 3600.0)), hours=2.0,
                      initial={"prefill": 50, "decode": 10})
    prefill = [d.targets()["prefill"] for d in decisions]
    assert all(b <= a for a, b in zip(prefill[2:], prefill[3:], strict=False)), "a falling load never scales up"
    last = decisions[-1]
    assert last.targets() == {"prefill": 1, "decode": 1}
    assert Reason.ZERO_TRAFFIC in last.reasons and Reason.FLOOR in last.reasons


@pytest.mark.parametrize("reason", [NoDataReason.NAN, NoDataReason.EMPTY, NoDataReason.TIMEOUT])
def test_missing_metrics_hold_and_never_scale_down(reason) -> None:
    def observe(plant, t):
        if 1200 <= t < 2400:
            return NoData(reason, "metrics missing", t)
        return plant.observe(100.0 if t < 1200 else 5.0)

    decisions = drive(POL, None, hours=1.0, observe=observe)
    during = [d for d in decisions if 1200 <= d.at_s < 2400]
    held = decisions[39].targets()  # last decision before the gap
    assert all(d.targets() == held for d in during)
    assert all(d.reasons == (Reason.NO_DATA_HOLD,) for d in during)
    # Stale data after the gap is not zero: once data is back, the low load may scale down.
    assert decisions[-1].targets()["prefill"] < held["prefill"]


def test_one_pool_missing_may_scale_up_but_not_down() -> None:
    def observe(plant, t):
        rate = 100.0 if t < 1800 else 10.0
        if t >= 1200:
            return plant.observe(rate, pools=("prefill",))
        return plant.observe(rate)

    decisions = drive(POL, None, hours=1.0, observe=observe)
    decode_then = decisions[39].targets()["decode"]
    assert all(d.targets()["decode"] >= decode_then for d in decisions[40:])
    assert any(Reason.NO_DATA_HOLD in d.pools["decode"].reasons for d in decisions[60:])
    assert decisions[-1].targets()["prefill"] < decisions[55].targets()["prefill"]  # prefill still follows


def test_external_scale_up_is_adopted_and_undone_gradually() -> None:
    def poke(plant, t, d):
        if t == 1200:
            plant.ready["prefill"] += 10

    decisions = drive(POL, lambda t: 50.0, hours=1.0, on_tick=poke)
    base = decisions[38].targets()["prefill"]
    after = [d.targets()["prefill"] for d in decisions[40:]]
    assert after[0] == base + 9  # adopted: only one replica removed per 60 s, not dropped at once
    assert all(a - b <= 1 for a, b in zip(after, after[1:], strict=False))  # removed one by one
    assert after[-1] == base


def test_budget_exhaustion_never_exceeds_the_budget() -> None:
    pol = policy(**BIG, budget={"max_gpus": 30})
    decisions = drive(pol, lambda t: 20.0 + 280.0 * min(1.0, t / 1800.0), hours=1.0)
    assert all(d.gpus <= 30 for d in decisions)
    last = decisions[-1]
    assert Reason.BUDGET in last.reasons and last.gpus in (29, 30)
    assert last.targets()["prefill"] >= 1 and last.targets()["decode"] >= 1


def test_oscillating_load_changes_direction_at_most_twice_an_hour() -> None:
    rng = random.Random(7)
    # Each phase lasts 0.8x the scale-down window (240 s of the old 300 s, 192 s of today's 240 s): a wave
    # faster than the window must not be followed down and up again.
    phase_s = 0.8 * POL.behavior.scale_down.stabilization_window_s

    def rate(t: float) -> float:
        square = 80.0 if int(t // phase_s) % 2 else 120.0
        return max(0.0, rng.gauss(square, math.sqrt(square * 30) / 30))

    decisions = drive(POL, rate, hours=3.0)
    for pool in ("prefill", "decode"):
        assert direction_changes_per_hour(decisions, pool) <= 2, pool


class Broken:
    """A forecaster that fails at every fit (a bug in a model must not stop scaling)."""

    name = "broken"

    def fit(self, times_s, values):  # noqa: ANN001, ANN201
        raise RuntimeError("boom")


def test_policy_forecaster_runs_or_says_it_fell_back() -> None:
    ctl = make_planner_controller(POL, PROFILE)  # the policy's forecaster ("auto")
    broken = PlannerController(POL, PROFILE, HistoryForecast(Broken(), POL.interval_s, POL.startup_s))
    for i in range(1, 20):
        obs = observation(i * 30.0, 50.0 + i)
        d = ctl.tick(obs, i * 30.0)
        d2 = broken.tick(obs, i * 30.0)
    assert Reason.FORECAST_FALLBACK in d2.reasons  # fell back to last-value, and says so
    assert d2.targets()["prefill"] >= sized(50.0)["prefill"]
    assert d.targets()["prefill"] >= sized(50.0)["prefill"]
    assert Reason.FORECAST_FALLBACK not in d.reasons  # 19 ticks of history span the 150 s horizon


def test_unknown_forecaster_is_a_config_error_naming_the_models() -> None:
    with pytest.raises(UserError, match=r"forecaster: unknown forecaster 'no-such-model'.*last-value"):
        make_planner_controller(POL, PROFILE, forecaster="no-such-model")  # --forecaster override
    with pytest.raises(UserError, match=r"forecast\.model' = 'no-such-model'.*allowed: .*last-value"):
        policy(forecast={"model": "no-such-model"})  # in the policy file: rejected when it is read
