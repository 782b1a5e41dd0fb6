"""Scale to zero (decide() stage 7): pools at min_replicas 0 reach zero only after scale_to_zero_after_s of
zero traffic, and prefill and decode go to zero and wake together. Table-driven, fake clock (ticks' times)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.decide import decide
from planner.decide.state import PlannerState, PoolMemory
from planner.errors import UserError
from planner.types import NoData, NoDataReason, Observation, Reason
from tests.support.decide_support import FREE, load_forecast, observation, policy, spec

ZERO = {"pools": {"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 0}}, "behavior": FREE,
        "scale_to_zero_after_s": 300}


def _run(rates: list[float], interval_s: float = 30.0, **over: object) -> list[tuple[dict[str, int], set[Reason]]]:
    sp = spec(policy(**{**ZERO, **over}))
    state: PlannerState | None = None
    out = []
    for i, rate in enumerate(rates):
        t = 1000.0 + i * interval_s
        d, state = decide(sp, observation(t, rate), load_forecast(rate), state, t)
        out.append((d.targets(), set(d.reasons)))
    return out


def test_busy_then_idle_goes_to_zero_only_after_the_window() -> None:
    ticks = _run([20.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert all(n >= 1 for n in ticks[0][0].values())
    idle = ticks[1:]
    # the last traffic was at t=1000: held at one replica each until 300 s have passed (t=1300, tick 10)
    for targets, reasons in idle[:9]:
        assert targets == {"prefill": 1, "decode": 1} and Reason.IDLE_WINDOW in reasons
    assert idle[9][0] == {"prefill": 0, "decode": 0} and Reason.IDLE_WINDOW not in idle[9][1]


def test_the_first_request_wakes_both_pools_together() -> None:
    ticks = _run([0.0] * 12 + [0.5])
    assert ticks[11][0] == {"prefill": 0, "decode": 0}
    woken, reasons = ticks[12]
    assert woken["prefill"] >= 1 and woken["decode"] >= 1


def test_a_window_of_zero_scales_down_at_once() -> None:
    ticks = _run([5.0, 0.0], scale_to_zero_after_s=0)
    assert ticks[1][0] == {"prefill": 0, "decode": 0}


def test_floors_above_zero_are_untouched() -> None:
    sp = spec(policy(behavior=FREE))
    d, state = decide(sp, observation(1000.0, 0.0), load_forecast(0.0), None, 1000.0)
    assert d.targets() == {"prefill": 1, "decode": 1} and state.last_traffic_s is None


def test_the_idle_window_survives_a_restart() -> None:
    sp = spec(policy(**ZERO))
    _, state = decide(sp, observation(1000.0, 3.0), load_forecast(3.0), None, 1000.0)
    again = PlannerState.from_dict(state.to_dict())
    assert again.last_traffic_s == 1000.0


@pytest.mark.parametrize(("pools", "message"), [
    ({"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 1}}, "go to zero together"),
    ({"prefill": {"min_replicas": 2}, "decode": {"min_replicas": 0}}, "set both to 0 or neither"),
])
def test_one_pool_alone_at_zero_is_refused(pools: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        policy(pools=pools)


def test_scale_to_zero_after_s_is_bounded() -> None:
    with pytest.raises(UserError, match="scale_to_zero_after_s"):
        policy(scale_to_zero_after_s=-1)


def test_keda_renders_min_replica_count_zero_with_an_activation_threshold() -> None:
    from planner.requests.scalers import scaled_object
    from planner.types import Pool

    so = scaled_object(policy(**ZERO), Pool.DECODE)
    assert so["spec"]["minReplicaCount"] == 0
    trigger = so["spec"]["triggers"][0]["metadata"]
    assert trigger["activationTargetValue"] == "0" and trigger["targetValue"] == "1"  # desired >= 1 wakes it


def _at_zero(sp, state=None):  # noqa: ANN001, ANN202 - a policy put to sleep: busy once, then idle past the window
    state = None
    for i, rate in enumerate([5.0] + [0.0] * 11):
        t = 1000.0 + i * 30.0
        d, state = decide(sp, observation(t, rate), load_forecast(rate), state, t)
    assert d.targets() == {"prefill": 0, "decode": 0}
    return state, t


@pytest.mark.parametrize(("seen", "expected", "reason"), [
    # no replica, no series: the source has nothing; the decision holds at zero
    (lambda t: NoData(NoDataReason.EMPTY, "no series", t), {"prefill": 0, "decode": 0}, Reason.NO_DATA_HOLD),
    # the router's wake signal, alone: both pools wake together, at once
    (lambda t: Observation(t, 30.0, {}, waiting=3), {"prefill": 1, "decode": 1}, Reason.WAKE_TOGETHER),
    # series present but no request started: the requests held at the router are traffic all the same
    (lambda t: replace(observation(t, 0.0), waiting=1), {"prefill": 1, "decode": 1}, Reason.WAKE_TOGETHER),
    # measured zero, nobody waiting: stays asleep
    (lambda t: observation(t, 0.0), {"prefill": 0, "decode": 0}, Reason.ZERO_TRAFFIC),
])
def test_a_request_held_at_the_router_wakes_a_policy_at_zero(seen, expected, reason) -> None:  # noqa: ANN001
    sp = spec(policy(**ZERO))
    state, t = _at_zero(sp)
    now = t + 7.0  # off the grid: a wake is a tick of its own
    d, after = decide(sp, seen(now), load_forecast(0.0), state, now)
    assert d.targets() == expected and reason in d.reasons
    woke = expected["prefill"] > 0
    assert (after.last_traffic_s == now) is woke
    if woke:  # the idle window starts again at the wake: the next idle tick keeps one replica each
        d2, _ = decide(sp, observation(now + 30, 0.0), load_forecast(0.0), after, now + 30)
        assert d2.targets() == {"prefill": 1, "decode": 1}


def test_the_wake_signal_is_ignored_by_a_policy_that_never_sleeps() -> None:
    sp = spec(policy(behavior=FREE))
    _, state = decide(sp, observation(1000.0, 2.0), load_forecast(2.0), None, 1000.0)
    d, _ = decide(sp, Observation(1010.0, 30.0, {}, waiting=4), load_forecast(2.0), state, 1010.0)
    assert Reason.WAKE_TOGETHER not in d.reasons  # sized as ever, from the forecast


def test_a_wake_never_exceeds_the_ceiling_nor_lowers_a_pool_that_is_up() -> None:
    sp = spec(policy(**ZERO))
    state, t = _at_zero(sp)
    state = state.with_pool("decode", replace(state.pool("decode"), target=3))  # decode was moved to 3 meanwhile
    d, _ = decide(sp, Observation(t + 1, 30.0, {}, waiting=1), None, state, t + 1)
    assert d.targets() == {"prefill": 1, "decode": 3}


@pytest.mark.parametrize("max_gpus, expected", [
    (2, {"prefill": 1, "decode": 1}),  # the idle window's replicas alone take 3 GPUs: a promise, as floors are
    (3, {"prefill": 1, "decode": 1}),
    (4, {"prefill": 2, "decode": 1}),  # within budget: the scale-down limit's 2 stands
])
def test_the_idle_windows_replica_fits_the_budget_beside_a_pool_still_scaling_down(max_gpus: int,
                                                                                  expected: dict) -> None:
    """Stage 7 wakes decode to one (2-GPU) replica after stage 5 fitted the budget: prefill, held at 2 by its
    scale-down limit (from 3), gives way, as to a floor (found by the floors-and-budget property: 4 GPUs of 2)."""
    sp = spec(policy(pools={"prefill": {"min_replicas": 0, "max_replicas": 2},
                            "decode": {"min_replicas": 0, "max_replicas": 1}}, budget={"max_gpus": max_gpus}))
    state = PlannerState(pools={"prefill": PoolMemory(target=3), "decode": PoolMemory(target=0)})
    d, _ = decide(sp, observation(0.0, 0.0), load_forecast(0.0), state, 0.0)
    assert d.targets() == expected
    assert (Reason.BUDGET in d.pools["prefill"].reasons) == (expected["prefill"] < 2)
    assert Reason.IDLE_WINDOW in d.pools["decode"].reasons
