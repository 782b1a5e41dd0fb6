"""A replay's error-budget postures (planner/sim/evaluate/postures.py): the share of scored ticks the planner spent
lean, burning, recovering or unmeasured, and the mean GPUs it asked for in each. Table-driven on fixed decisions,
time an argument; the backtest's report carries them for the planner only (tests/test_sim_backtest.py)."""

from __future__ import annotations

import pytest

from planner.sim.evaluate.postures import postures
from planner.types import Decision, PoolDecision, Reason

LEAN, BURN, OVER, UNMEASURED, HOLD = (Reason.BUDGET_LEAN, Reason.BUDGET_BURNING, Reason.BUDGET_OVERSPENT,
                                      Reason.BUDGET_UNMEASURED, Reason.NO_DATA_HOLD)


def tick(at_s: float, prefill: int, decode: int, *reasons: Reason) -> Decision:
    """A decision with the budget's reason on both pools, decode at TP 2."""
    why = (Reason.SLA_CAPACITY, *reasons)
    return Decision(at_s, {"prefill": PoolDecision(prefill, 1, float(prefill), why),
                           "decode": PoolDecision(decode, 2, float(decode), why)})


@pytest.mark.parametrize("ticks, score_from_s, want", [
    pytest.param([tick(0, 9, 2, UNMEASURED), tick(30, 5, 1, LEAN), tick(60, 7, 1, LEAN), tick(90, 8, 2, BURN)], 30.0,
                 {"lean": (2 / 3, 8.0), "burning": (1 / 3, 12.0), "recovering": (0.0, None), "unmeasured": (0.0, None),
                  "held": (0.0, None)},
                 id="the-warm-up-tick-is-not-counted"),
    pytest.param([tick(0, 1, 1, HOLD), tick(30, 10, 3, OVER), tick(60, 4, 1, UNMEASURED), tick(90, 4, 1)], 0.0,
                 {"lean": (0.0, None), "burning": (0.0, None), "recovering": (0.25, 16.0), "unmeasured": (0.25, 6.0),
                  "held": (0.25, 3.0)},
                 id="a-no-data-hold-is-held-and-a-tick-without-a-reason-counts-in-none"),
    pytest.param([tick(0, 4, 1, LEAN, HOLD)], 0.0,
                 {"lean": (1.0, 6.0), "burning": (0.0, None), "recovering": (0.0, None), "unmeasured": (0.0, None),
                  "held": (0.0, None)},
                 id="a-pool-held-for-missing-data-on-a-lean-tick-is-lean"),
])
def test_shares_and_gpus_per_posture(ticks: list[Decision], score_from_s: float,
                                     want: dict[str, tuple[float, float | None]]) -> None:
    got = postures(ticks, score_from_s)
    assert got is not None
    assert {k: (v["share"], v["mean_gpus"]) for k, v in got.items()} == {
        k: (round(share, 4), gpus) for k, (share, gpus) in want.items()}


@pytest.mark.parametrize("ticks", [
    pytest.param([tick(0, 4, 1), tick(30, 5, 1)], id="no-budget-reason-a-baseline-or-budget-control-off"),
    pytest.param([tick(0, 1, 1, HOLD), tick(30, 5, 1)], id="budget-control-off-with-a-first-tick-hold"),
    pytest.param([tick(0, 4, 1, LEAN)], id="only-warm-up-ticks-carry-one"),
    pytest.param([], id="no-decisions"),
])
def test_nothing_to_report(ticks: list[Decision]) -> None:
    assert postures(ticks, 15.0) is None
