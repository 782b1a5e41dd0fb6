"""Scale-down rules for steady traffic (behavior.steady): the burstiness measure, the switch, the memory."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
import yaml

from planner.config import ScalingPolicy, ScalingRules, Steady
from planner.decide import decide
from planner.forecast.burst import rate_cv, rate_swing_cv
from planner.policy_file import load_policy
from planner.types import Reason
from tests.support.decide_support import (
    EXAMPLE,
    REPO,
    drive,
    free_policy,
    load_forecast,
    observation,
    policy,
    spec,
)

STEADY = {"behavior": {"steady": {"max_rate_cv": 0.3, "over_s": 600}}}
BIG = {"pools": {"prefill": {"max_replicas": 200}, "decode": {"max_replicas": 60}}}


def _series(rates: list[float], step_s: float = 30.0) -> tuple[list[float], list[float]]:
    return [step_s * (i + 1) for i in range(len(rates))], rates


def _poisson(rate: float, n: int, window_s: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        count, t = 0, rng.expovariate(rate)
        while t < window_s:
            count, t = count + 1, t + rng.expovariate(rate)
        out.append(count / window_s)
    return out


@pytest.mark.parametrize("rates, window_s, expected", [
    pytest.param([10.0] * 20, 60.0, 0.0, id="flat"),
    pytest.param([0.0] * 20, 60.0, 0.0, id="all-zero"),
    # mean 15, variance 25, Poisson's share 15/60 = 0.25: sqrt(24.75) / 15
    pytest.param([10.0, 20.0] * 10, 60.0, math.sqrt(24.75) / 15.0, id="two-level"),
    # Poisson alone explains all of a small spread: nothing is left
    pytest.param([0.9, 1.1] * 10, 1.0, 0.0, id="within-poisson-noise"),
])
def test_rate_cv_takes_poissons_share_out(rates, window_s, expected) -> None:
    t, r = _series(rates)
    assert rate_cv(t, r, t[-1], 600.0, window_s) == pytest.approx(expected, abs=1e-12)


def test_rate_cv_of_poisson_counts_is_small_and_of_on_off_load_large() -> None:
    t, r = _series(_poisson(2.0, 20, 60.0, seed=1))
    raw = (sum((x - 2.0) ** 2 for x in r) / len(r)) ** 0.5 / 2.0
    assert raw > 0.05  # counting noise alone is visible in the raw figure ...
    assert rate_cv(t, r, t[-1], 600.0, 60.0) < 0.1  # ... and gone once Poisson's share is taken out
    t, r = _series([0.0, 0.0, 28.0, 28.0] * 5)  # Azure code's on/off minutes
    assert rate_cv(t, r, t[-1], 600.0, 60.0) > 0.9


@pytest.mark.parametrize("n, now_s, why", [
    pytest.param(3, 90.0, "fewer than 4 readings", id="three-readings"),
    pytest.param(9, 270.0, "under half of over_s (600 s)", id="short-history"),
])
def test_rate_cv_is_unknown_without_enough_history(n, now_s, why) -> None:
    t, r = _series([10.0] * n)
    assert rate_cv(t, r, now_s, 600.0, 60.0) is None, why


def test_rate_cv_reads_only_the_last_over_s_and_rejects_bad_windows() -> None:
    t, r = _series([100.0] * 40 + [10.0] * 20)  # the burst ended 600 s ago
    assert rate_cv(t, r, t[-1], 600.0, 60.0) == 0.0
    # 1,200 s back: 20 readings of 100 and 20 of 10, mean 55, standard deviation 45
    assert rate_cv(t, r, t[-1], 1200.0, 60.0) == pytest.approx(math.sqrt(45.0**2 - 55.0 / 60.0) / 55.0)
    with pytest.raises(ValueError, match="window_s"):
        rate_cv(t, r, t[-1], 600.0, 0.0)


@pytest.mark.parametrize("rates, window_s, expected", [
    pytest.param([10.0] * 20, 60.0, 0.0, id="flat"),
    pytest.param([0.0] * 20, 60.0, 0.0, id="all-zero"),
    # readings 30 s apart over 60 s windows share 30 s: counting variance of one difference 2 * 15 * 30 / 60^2;
    # half the mean square difference 100 / 2 = 50, less Poisson's share 15 * 30 / 3600 = 0.125
    pytest.param([10.0, 20.0] * 10, 60.0, math.sqrt(50.0 - 0.125) / 15.0, id="two-level-alternating"),
    # one step of 30 among 20 readings: 900 / (2 * 19), mean 25, less 25 * 30 / 3600
    pytest.param([10.0] * 10 + [40.0] * 10, 60.0, math.sqrt(900.0 / 38.0 - 25.0 * 30.0 / 3600.0) / 25.0,
                 id="one-step"),
    # windows shorter than the spacing share nothing: Poisson's r / window_s = 1 explains all of 0.04 / 2
    pytest.param([0.9, 1.1] * 10, 1.0, 0.0, id="within-poisson-noise"),
])
def test_rate_swing_cv_measures_successive_differences(rates, window_s, expected) -> None:
    t, r = _series(rates)
    assert rate_swing_cv(t, r, t[-1], 600.0, window_s) == pytest.approx(expected, abs=1e-12)


def test_a_step_is_bursty_to_the_level_measure_for_over_s_and_to_the_swing_for_minutes() -> None:
    """A fourfold step that stays: the level measure reads the mix of both levels for most of the time the step
    is inside over_s; the swing reads it once, and each new reading at the new level dilutes it."""
    t, r = _series([5.0] * 20 + [20.0] * 20)
    after = lambda k: t[19 + k]  # noqa: E731 - the k-th reading at the new level
    assert all(rate_cv(t, r, after(k), 600.0, 60.0) > 0.3 for k in range(1, 17))  # 8 of its 10 minutes
    swings = [rate_swing_cv(t, r, after(k), 600.0, 60.0) for k in range(1, 19)]
    assert swings[0] > 0.3 and all(s < 0.3 for s in swings[4:])  # bursty for its first minutes only
    # On/off load swings at every reading: bursty to both, and by about as much
    t, r = _series([0.0, 0.0, 28.0, 28.0] * 5)
    assert rate_swing_cv(t, r, t[-1], 600.0, 60.0) > 0.6 and rate_cv(t, r, t[-1], 600.0, 60.0) > 0.9


def test_rate_swing_cv_of_poisson_counts_is_small_and_needs_history() -> None:
    t, r = _series(_poisson(2.0, 20, 60.0, seed=1), step_s=60.0)  # windows that do not overlap
    assert rate_swing_cv(t, r, t[-1], 1200.0, 60.0) < 0.1
    t, r = _series([10.0] * 9)
    assert rate_swing_cv(t, r, 270.0, 600.0, 60.0) is None  # under half of over_s
    with pytest.raises(ValueError, match="window_s"):
        rate_swing_cv(t, r, t[-1], 600.0, 0.0)


def test_the_policy_picks_the_measure_the_controller_reads() -> None:
    """After a fourfold step that stays, the swing measure gives the steady rules back within minutes; the
    level measure holds the hedge while the step is inside over_s."""
    step = lambda t: 20.0 if t < 1800 else 80.0  # noqa: E731
    swing = {"behavior": {"steady": {"max_rate_cv": 0.3, "over_s": 600, "measure": "swing"}}}
    by_swing = drive(policy(**BIG, **swing), step, hours=1.0)
    by_level = drive(policy(**BIG, **STEADY), step, hours=1.0)
    at = lambda ds, s: next(d for d in ds if d.at_s >= s)  # noqa: E731
    for s in (2100.0, 2250.0):  # 5 and 7.5 minutes after the step
        assert at(by_swing, s).detail["scale_down_rules"] == "steady", s
        assert at(by_level, s).detail["scale_down_rules"] == "hedge", s
        assert at(by_swing, s).detail["rate_cv"] < 0.3 < at(by_level, s).detail["rate_cv"]


@pytest.mark.parametrize("steady, cv, window_s", [
    pytest.param(None, 0.0, 240, id="not-configured"),
    pytest.param(Steady(), None, 240, id="unknown"),
    pytest.param(Steady(), 0.31, 240, id="bursty"),
    pytest.param(Steady(), 0.3, 0, id="at-the-threshold"),
    pytest.param(Steady(), 0.05, 0, id="steady"),
])
def test_the_rules_in_force_follow_the_burstiness(steady, cv, window_s) -> None:
    pol = policy()
    behavior = pol.behavior.model_copy(update={"steady": steady})
    rules, is_steady = behavior.for_rate_cv(cv), behavior.is_steady(cv)
    assert rules.scale_down.stabilization_window_s == window_s
    assert is_steady == (window_s == 0)
    assert rules.scale_up == behavior.scale_up


def _decide_at(pol, rates: list[float], cvs: list[float | None]):
    """decide() tick by tick, the pools ready at whatever was last decided (they start at the size the first
    rate needs)."""
    s, state, out = spec(pol), None, []
    first, _ = decide(spec(free_policy()), observation(0.0, rates[0]), load_forecast(rates[0]), None, 0.0)
    ready = first.targets()
    for i, (rate, cv) in enumerate(zip(rates, cvs, strict=True)):
        now = 30.0 * (i + 1)
        forecast = replace(load_forecast(rate), rate_cv=cv)
        d, state = decide(s, observation(now, rate, ready=ready), forecast, state, now)
        ready = d.targets()
        out.append(d)
    return out


def test_steady_load_gives_capacity_back_a_fifth_a_tick_and_bursty_load_waits() -> None:
    """The steady rules have no window but give back at most 20 % of a pool per 30 s: one low read of a
    clumped flat load must not take a pool 14 -> 10 in a tick (clumped-long's seed 3)."""
    pol = policy(**BIG, **STEADY)
    rates = [200.0] * 4 + [50.0] * 10
    steady = _decide_at(pol, rates, [0.1] * 14)
    bursty = _decide_at(pol, rates, [0.9] * 14)
    high, low = steady[3].pools["prefill"].replicas, steady[-1].pools["prefill"].desired_unclamped
    assert high > 2 * low
    sizes = [d.pools["prefill"].replicas for d in steady[3:]]
    assert sizes[-1] == low  # reached within the ten ticks, and never below what the load asks
    for before, after in zip(sizes, sizes[1:], strict=False):
        assert after == max(low, math.floor(0.8 * before))  # no window: a fifth of the pool every tick, floored
    assert Reason.SCALE_DOWN_LIMIT in steady[4].pools["prefill"].reasons
    assert steady[4].detail["scale_down_rules"] == "steady" and steady[4].detail["rate_cv"] == 0.1
    assert [d.pools["prefill"].replicas for d in bursty[4:8]] == [high] * 4  # held by the 240 s window
    assert all(Reason.SCALE_DOWN_STABILIZED in d.pools["prefill"].reasons for d in bursty[4:8])
    assert bursty[4].detail["scale_down_rules"] == "hedge"


@pytest.mark.parametrize("keep_s, kept", [pytest.param(0.0, [150.0], id="steady-window-only"),
                                           pytest.param(240.0, [0.0, 60.0, 150.0], id="the-hedges-window")])
def test_recommendations_are_remembered_for_the_hedges_window_under_the_steady_rules(keep_s, kept) -> None:
    """Under the steady rules (no window) the recommendations are still kept for the hedge's 240 s, so traffic
    that turns bursty finds the hedge's window filled, as if it had been in force all along."""
    from planner.decide.behavior import behave
    from planner.decide.state import PoolMemory

    pol = policy(**STEADY)
    rules, is_steady = pol.behavior.for_rate_cv(0.1), pol.behavior.is_steady(0.1)
    assert is_steady
    memory = PoolMemory(target=10, recommendations=((-300.0, 12), (0.0, 10), (60.0, 9)))
    b = behave(8, 10, memory, 150.0, rules, pol.pool("prefill"), keep_s=keep_s)
    assert [t for t, _ in b.memory.recommendations] == kept
    assert b.replicas == 8  # the steady rules give back at once either way (10 -> 8: a fifth of the pool)


def test_the_controller_measures_burstiness_only_when_steady_rules_are_configured() -> None:
    ramp = lambda t: 100.0 - t / 60.0  # noqa: E731 - a slow, steady decline
    with_steady = drive(policy(**BIG, **STEADY), ramp, hours=0.5, initial={"prefill": 40, "decode": 20})
    hedged = drive(policy(**BIG), ramp, hours=0.5, initial={"prefill": 40, "decode": 20})
    assert "rate_cv" not in hedged[-1].detail and hedged[-1].detail["scale_down_rules"] == "hedge"
    assert with_steady[5].detail["scale_down_rules"] == "hedge"  # 3 min of history: unknown, so the hedge
    assert with_steady[-1].detail["rate_cv"] < 0.05  # exact rates: the ramp's own spread (10 of ~73 req/s)
    assert with_steady[-1].detail["scale_down_rules"] == "steady"
    prefill = lambda ds: sum(d.pools["prefill"].replicas for d in ds)  # noqa: E731
    assert prefill(with_steady) < prefill(hedged)  # replica-intervals: capacity given back sooner


def test_the_example_ships_the_steady_rules() -> None:
    pol = load_policy(EXAMPLE)
    assert pol.behavior.steady == Steady()
    assert pol.behavior.steady.scale_down.stabilization_window_s == 0
    [cap] = pol.behavior.steady.scale_down.policies
    assert (cap.type, cap.value, cap.period_s) == ("percent", 20, 30)


def test_a_bad_steady_block_names_the_key() -> None:
    from planner.errors import UserError
    from planner.policy_file import parse_policy
    from tests.support.decide_support import example_data, merge

    with pytest.raises(UserError, match=r"behavior\.steady\.max_rate_cv"):
        parse_policy(merge(example_data(), {"behavior": {"steady": {"max_rate_cv": 0}}}), "p.yaml")
    with pytest.raises(UserError, match=r"behavior\.steady\.measure.*'level'.*'swing'"):
        parse_policy(merge(example_data(), {"behavior": {"steady": {"measure": "spread"}}}), "p.yaml")


def test_a_burning_error_budget_keeps_the_hedge_on_steady_traffic() -> None:
    """The steady rules give capacity back at once; while the SLA's budget burns fast (or is not yet measured)
    the hedge's window holds instead: a budget being spent cannot also pay for a rebound."""
    from planner.types import SlaBudget

    pol = policy(**BIG, **STEADY, sla={"budget_control": True, "lean_quantile": 0.8})
    healthy = SlaBudget(remaining=0.9, burn_short=0.5, burn_long=0.4, attainment=0.995, requests=30_000)
    burning = replace(healthy, burn_short=5.0)
    rates = [200.0] * 4 + [50.0] * 4
    out = {}
    spent = replace(healthy, remaining=-0.1)
    for name, budget in (("healthy", healthy), ("burning", burning), ("spent", spent), ("unknown", None)):
        s, state, ready = spec(pol), None, None
        first, _ = decide(spec(free_policy()), observation(0.0, rates[0]), load_forecast(rates[0]), None, 0.0)
        ready, decisions = first.targets(), []
        for i, rate in enumerate(rates):
            now = 30.0 * (i + 1)
            forecast = replace(load_forecast(rate), rate_cv=0.1, sla_budget=budget)
            d, state = decide(s, observation(now, rate, ready=ready), forecast, state, now)
            ready = d.targets()
            decisions.append(d)
        out[name] = decisions
    high = out["healthy"][3].pools["prefill"].replicas
    assert out["healthy"][4].pools["prefill"].replicas < high - 2  # steady rules: given back at once
    assert out["healthy"][4].detail["scale_down_rules"] == "steady"
    # spent: on steady load (rate cv 0.1) the conservative headroom, not the recovery one, and the hedge
    for name, why in (("burning", Reason.BUDGET_BURNING), ("spent", Reason.BUDGET_BURNING),
                      ("unknown", Reason.BUDGET_UNMEASURED)):
        assert [d.pools["prefill"].replicas for d in out[name][4:]] == [high] * 4, name
        assert out[name][4].detail["scale_down_rules"] == "hedge"
        assert why in out[name][4].pools["prefill"].reasons


def test_steady_scale_down_yaml_is_the_hedge_with_steady_rules() -> None:
    hedge = yaml.safe_load((REPO / "policies" / "hedge.yaml").read_text())
    steady = yaml.safe_load((REPO / "policies" / "steady-scale-down.yaml").read_text())
    assert hedge["behavior"]["steady"] is None and steady["behavior"]["steady"]["max_rate_cv"] == 0.3
    for data in (hedge, steady):
        data.pop("name")
        data["behavior"].pop("steady")
    assert steady == hedge
    pol = load_policy(REPO / "policies" / "steady-scale-down.yaml")
    # the steady rules as first measured: any share given back at once (the default caps it at a fifth)
    free = Steady(scale_down=ScalingRules(stabilization_window_s=0,
                                          policies=[ScalingPolicy(type="percent", value=100, period_s=30)]))
    assert pol.behavior.steady == free and not pol.sla.budget_control
