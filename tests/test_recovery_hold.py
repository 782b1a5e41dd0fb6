"""While the error budget recovers (reason budget_overspent), a scale-down waits sla.recover_hold_s: bursty load
misses where a burst follows a lull whose capacity was given back (decide/behavior.py, ``recovery_rules``)."""

from __future__ import annotations

import pytest

from planner.decide.behavior import recommend, recovery_rules
from planner.decide.state import PlannerState, PoolMemory
from planner.types import Reason
from tests.support.decide_support import observation, policy

NOW_S = 3600.0


def held_at(reason: Reason, hold_s: int, lull_s: float) -> int:
    """Prefill asked 6 replicas until ``lull_s`` ago, 2 since; decode steady at 1. Returns prefill's replicas."""
    pol = policy(sla={"budget_control": True, "recover_hold_s": hold_s})
    history = tuple((NOW_S - lull_s - 30.0 * k, 6) for k in range(4)) + tuple(
        (t, 2) for t in (NOW_S - 30.0 * k for k in range(1, int(lull_s // 30))))
    state = PlannerState(pools={"prefill": PoolMemory(target=6, recommendations=history),
                                "decode": PoolMemory(target=1, recommendations=((NOW_S - 30.0, 1),))})
    obs = observation(NOW_S, 10.0, ready={"prefill": 6, "decode": 1})
    out = recommend(pol, {"prefill": 2, "decode": 1}, {"prefill": (reason,), "decode": (reason,)},
                    {"prefill": True, "decode": True}, state, obs, NOW_S)
    return out["prefill"].replicas


@pytest.mark.parametrize("reason, hold_s, lull_s, replicas", [
    # Recovering: the 6 asked 10 minutes ago are within the 900 s hold, so the lull keeps them.
    pytest.param(Reason.BUDGET_OVERSPENT, 900, 600.0, 6, id="recovering-holds-through-a-10-minute-lull"),
    # Past the hold the hedge's rate limit applies: one replica a minute.
    pytest.param(Reason.BUDGET_OVERSPENT, 900, 960.0, 5, id="recovering-gives-back-after-the-hold"),
    # Burning (not recovering): the hedge's 240 s window alone.
    pytest.param(Reason.BUDGET_BURNING, 900, 600.0, 5, id="burning-keeps-the-hedge"),
    pytest.param(Reason.BUDGET_LEAN, 900, 600.0, 5, id="lean-keeps-the-hedge"),
    # A hold below the hedge's own window changes nothing.
    pytest.param(Reason.BUDGET_OVERSPENT, 0, 600.0, 5, id="hold-0-is-the-hedge"),
    pytest.param(Reason.BUDGET_OVERSPENT, 900, 200.0, 6, id="within-the-hedge-anyway"),
])
def test_recovery_holds_capacity_through_lulls(reason: Reason, hold_s: int, lull_s: float, replicas: int) -> None:
    assert held_at(reason, hold_s, lull_s) == replicas


def test_the_recovery_rules_only_lengthen_the_scale_down_window() -> None:
    pol = policy(sla={"budget_control": True, "recover_hold_s": 900})
    rules = recovery_rules(pol, pol.behavior)
    assert rules.scale_down.stabilization_window_s == 900
    assert rules.scale_down.policies == pol.behavior.scale_down.policies
    assert rules.scale_up == pol.behavior.scale_up
    short = policy(sla={"budget_control": True, "recover_hold_s": 60})
    assert recovery_rules(short, short.behavior) == short.behavior  # the hedge's 240 s is longer
