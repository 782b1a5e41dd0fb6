"""Scale to zero (decide() stage 7): pools at min_replicas 0 reach zero only after scale_to_zero_after_s of
zero traffic, and prefill and decode go to zero and wake together. Table-driven, fake clock (ticks' times)."""

from __future__ import annotations

import pytest

from planner.decide import decide
from planner.decide.state import PlannerState
from planner.errors import UserError
from planner.types import Reason
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
