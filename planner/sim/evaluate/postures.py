"""How long a replay's planner spent in each error-budget posture (decide/error_budget.py).

The GPU-hours of a run follow its postures: lean (``budget_lean``: the lean quantile and, on steady load, the
steady scale-down rules), burning (``budget_burning``: the conservative quantile and the hedge), recovering
(``budget_overspent``: the recovery quantile and its hold) and unmeasured (``budget_unmeasured``: a start or a
young window, sized conservatively). A run that costs more than expected usually spent its hour burning or
recovering; the share of scored ticks in each says so without a scratch replay. Per posture, the mean GPUs the
decisions of those ticks asked for says what each posture cost.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.types import Decision, Reason

BUDGET_POSTURES = (("lean", Reason.BUDGET_LEAN), ("burning", Reason.BUDGET_BURNING),
                   ("recovering", Reason.BUDGET_OVERSPENT), ("unmeasured", Reason.BUDGET_UNMEASURED))
# The budget's reasons first; a tick that decided nothing for want of data (a start's first tick) is "held".
POSTURES = (*BUDGET_POSTURES, ("held", Reason.NO_DATA_HOLD))


def _posture(decision: Decision) -> str | None:
    reasons = {*decision.reasons, *(r for p in decision.pools.values() for r in p.reasons)}
    return next((name for name, reason in POSTURES if reason in reasons), None)


def postures(decisions: Sequence[Decision], score_from_s: float) -> dict[str, dict[str, float | None]] | None:
    """``{lean: {share, mean_gpus}, burning: ..., recovering: ..., unmeasured: ..., held: ...}`` over the scored
    ticks (a tick with none of these reasons counts in none); None when no scored tick carried a budget reason (a
    baseline, or ``sla.budget_control: false``)."""
    counted: dict[str, list[float]] = {name: [] for name, _ in POSTURES}
    scored = [d for d in decisions if d.at_s >= score_from_s]
    for d in scored:
        name = _posture(d)
        if name is not None:
            counted[name].append(float(d.gpus))
    if not any(counted[name] for name, _ in BUDGET_POSTURES):
        return None
    return {name: {"share": round(len(g) / len(scored), 4),
                   "mean_gpus": round(sum(g) / len(g), 2) if g else None}
            for name, g in counted.items()}
