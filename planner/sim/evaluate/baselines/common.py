"""What every baseline shares: GPUs per replica, floors/ceilings, the Decision record, a proportional budget."""

from __future__ import annotations

import math
from collections.abc import Mapping

from planner.config import Policy
from planner.profile import Profile
from planner.types import Decision, Pool, PoolDecision, Reason


def gpus_per_replica(policy: Policy, profile: Profile) -> dict[str, int]:
    p = profile.prefill_curve(profile.selected_tp("prefill")).gpus
    d = profile.decode_curve(profile.selected_tp("decode")).gpus
    return {Pool.PREFILL: p, Pool.DECODE: d, Pool.AGGREGATED: d}


def clamp_pool(policy: Policy, pool: str, n: int) -> tuple[int, tuple[Reason, ...]]:
    spec = policy.pool(pool)
    if n < spec.min_replicas:
        return spec.min_replicas, (Reason.FLOOR,)
    if n > spec.max_replicas:
        return spec.max_replicas, (Reason.CEILING,)
    return n, ()


def make_decision(now_s: float, targets: Mapping[str, int], gpus: Mapping[str, int],
                  desired: Mapping[str, float] | None = None,
                  reasons: Mapping[str, tuple[Reason, ...]] | None = None) -> Decision:
    pools = {p: PoolDecision(replicas=int(n), gpus_per_replica=gpus[p],
                             desired_unclamped=float((desired or {}).get(p, n)),
                             reasons=(reasons or {}).get(p, (Reason.BASELINE,)))
             for p, n in targets.items()}
    return Decision(at_s=now_s, pools=pools, reasons=(Reason.BASELINE,))


def budget_clamp(policy: Policy, targets: dict[str, int], gpus: Mapping[str, int]) -> tuple[dict[str, int], bool]:
    """Proportional GPU-budget clamp (Dynamo's): scale every pool by budget / wanted, floors kept."""
    cap = policy.budget.max_gpus
    total = sum(n * gpus[p] for p, n in targets.items())
    if cap is None or total <= cap:
        return targets, False
    f = cap / total
    out = {p: max(policy.pool(p).min_replicas, int(math.floor(n * f))) for p, n in targets.items()}
    return out, True
