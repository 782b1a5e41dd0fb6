"""TTFT of a prefill pool serving a *mix* of prompt lengths (M/G/c with the mix's own service times).

Why not one mean prompt: with prompts from 1k to 85k tokens, service times are far from alike. A pool sized
for the mean prompt with an exponential spread waits too little (Allen-Cunneen scales waits by (1 + cs^2)/2,
and the mix's cs^2 is several times an exponential's 1), and it cannot tell a prompt that misses TTFT because
of queueing from one that misses on any number of replicas (its own prefill alone is longer than the target).
Here each bucket b of the mix (share w_b, prompt length x_b) has its own prefill time s_b on one replica and
its own fixed rest of TTFT f_b (KV transfer + first decode step). With the M/G/c waiting-time tail
P(W > t) = C(c, a) exp(-theta t), theta = 2 (c/S - lambda) / (1 + cs^2), S = sum w_b s_b:

    miss(c, T) = sum over b with s_b + f_b > T of w_b                     (infeasible: no pool helps)
               + sum over the others of w_b C(c, a) exp(-theta (T - s_b - f_b))

Worked example (H200, Llama-3.1-8B): a lognormal mix with mean 12k and p99 85k tokens has cs^2 ~ 4 in prefill
time, so waits are 2.5x what the exponential assumption predicts, and 12 % of its prompts take longer than a
1 s TTFT to prefill alone: a 95 % TTFT target cannot be met, and sizing the pool to try only adds GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.decide.queueing import MAX_UTILISATION, Wait, smallest_pool, wait_at
from planner.decide.sizing_model import SizingModel
from planner.perf.engine import EngineModel
from planner.perf.kv import transfer_s
from planner.types import LengthMix

# Below this share of the miss budget left for queueing, sizing chases a percentile the mix barely allows:
# the queueing budget never drops under half of the percentile's share among the requests that can meet it.
MIN_BUDGET_SHARE = 0.5


@dataclass(frozen=True)
class PrefillMix:
    weights: tuple[float, ...]
    service_s: tuple[float, ...]  # prefill time of each bucket's prompt on one replica
    fixed_s: tuple[float, ...]  # the rest of its TTFT: KV transfer + first decode step
    mean_s: float  # S: mean service time
    scv: float  # squared coefficient of variation of the service time

    def infeasible_share(self, target_s: float) -> float:
        """Share of requests whose own prefill (+ the rest) exceeds ``target_s``: they miss on any pool."""
        return sum(w for w, s, f in zip(self.weights, self.service_s, self.fixed_s, strict=True) if s + f > target_s)


def prefill_mix(model: SizingModel, engine: EngineModel, mix: LengthMix, isl_mean: float,
                with_transfer: bool) -> PrefillMix:
    """The mix moved to ``isl_mean`` (its shape kept) with each bucket's service and fixed times."""
    scaled = mix.scaled_to(max(1.0, isl_mean))
    service = tuple(model.prefill_s(engine, max(1.0, x)) for x in scaled.tokens)
    first_step_s = model.itl_target_ms / 1e3
    fixed = tuple(first_step_s + (transfer_s(x, model.kv_bytes_per_token, model.link_bytes_per_s)
                                  if with_transfer else 0.0) for x in scaled.tokens)
    mean = sum(w * s for w, s in zip(scaled.weights, service, strict=True))
    second = sum(w * s * s for w, s in zip(scaled.weights, service, strict=True))
    scv = max(0.0, second / (mean * mean) - 1.0) if mean > 0 else 0.0
    return PrefillMix(scaled.weights, service, fixed, mean, scv)


def miss_share(pm: PrefillMix, wait: Wait, rate_rps: float, target_s: float) -> float:
    """Share of requests whose TTFT exceeds ``target_s`` with ``wait.servers`` replicas at ``rate_rps``."""
    if wait.servers <= 0 or wait.utilisation >= 1.0:
        return 1.0
    theta = 2.0 * (wait.servers / pm.mean_s - rate_rps) / (1.0 + pm.scv)
    out = 0.0
    for w, s, f in zip(pm.weights, pm.service_s, pm.fixed_s, strict=True):
        slack = target_s - s - f
        out += w if slack < 0 else w * wait.p_wait * math.exp(-theta * slack)
    return min(1.0, out)


def queueing_budget(pm: PrefillMix, target_s: float, percentile: float) -> float:
    """The share of requests that may miss TTFT *by waiting*: the percentile's share less what no pool can
    serve in time; never below MIN_BUDGET_SHARE of the percentile's share among the requests that can be
    served (so a mix that barely allows the percentile is not chased with ever more replicas)."""
    infeasible = pm.infeasible_share(target_s)
    return max((1.0 - percentile) - infeasible, MIN_BUDGET_SHARE * (1.0 - percentile) * (1.0 - infeasible))


def queueing_fits(pm: PrefillMix, rate_rps: float, target_s: float, percentile: float) -> Callable[[Wait], bool]:
    """Whether a pool (its Wait) keeps the requests that miss TTFT by waiting within the budget."""
    budget = queueing_budget(pm, target_s, percentile)
    infeasible = pm.infeasible_share(target_s)
    return lambda w: miss_share(pm, w, rate_rps, target_s) - infeasible <= budget


def smallest_pool_for_mix(pm: PrefillMix, rate_rps: float, target_s: float, percentile: float,
                          ceiling: int) -> Wait | None:
    return smallest_pool(rate_rps, pm.mean_s, pm.scv, percentile, queueing_fits(pm, rate_rps, target_s, percentile),
                         ceiling=ceiling)


def ttft_quantile_s(pm: PrefillMix, servers: int, rate_rps: float, percentile: float) -> float:
    """TTFT at ``percentile`` over the whole mix (inf when the pool is overloaded)."""
    wait = wait_at(servers, rate_rps, pm.mean_s, pm.scv, percentile)
    if wait.utilisation >= min(1.0, MAX_UTILISATION + 0.05) and rate_rps > 0:
        return math.inf
    lo, hi = 0.0, max(s + f for s, f in zip(pm.service_s, pm.fixed_s, strict=True))
    while miss_share(pm, wait, rate_rps, hi) > 1.0 - percentile:  # the wait's tail reaches beyond
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            return math.inf
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if miss_share(pm, wait, rate_rps, mid) > 1.0 - percentile else (lo, mid)
    return hi
