"""TTFT of a prefill pool over the prompt-length distribution: a *mix* of prompt lengths (M/G/c with the mix's own
service times), or, with no mix known, prompts exponential around the mean. Both are a PromptTimes: what the
sizing in planner/decide/capacity.py needs to know of the prompts, so it has one path for either.

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

The exponential case keeps its closed form (the wait's quantile plus the prompt at the percentile), not a
one-bucket mix: a one-bucket mix gives the same TTFT only up to the bisection's tolerance, and sizes a prompt
that alone misses the target differently (see ExponentialPrompts.rules).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from planner.decide.queueing import INFEASIBLE_UTILISATION, MAX_UTILISATION, Wait
from planner.decide.sizing_model import SizingModel
from planner.perf.engine import EngineModel
from planner.perf.kv import transfer_s
from planner.types import LengthMix, Reason

# Request ISLs without a mix are modelled as exponentially distributed around the forecast mean: it is the
# maximum-entropy choice for a known mean, and close to the Azure traces' tails (conv: mean 1,155, p99 4,142 =
# 3.6x mean; an exponential's p99 is 4.6x mean), so it errs on the safe side.
ISL_CV = 1.0

# Below this share of the miss budget left for queueing, sizing chases a percentile the mix barely allows:
# the queueing budget never drops under half of the percentile's share among the requests that can meet it.
MIN_BUDGET_SHARE = 0.5


@dataclass(frozen=True)
class Rule:
    """Which pool sizes (their Wait) meet a TTFT target, and the reasons a size chosen by this rule carries."""

    fits: Callable[[Wait], bool]
    reasons: tuple[Reason, ...] = ()
    # Not the SLA but what to size for when no pool meets it (a prefill pool still needs a size; an aggregated
    # pool reports the SLA infeasible instead).
    last_resort: bool = False


class PromptTimes(Protocol):
    """The prompts' prefill service times as sizing sees them (PrefillMix, ExponentialPrompts)."""

    @property
    def mean_s(self) -> float: ...  # mean service time on one replica: the queue's S

    @property
    def scv(self) -> float: ...  # its squared coefficient of variation

    @property
    def mean_ttft_s(self) -> float: ...  # mean TTFT without queueing: prefill + KV transfer + first step

    def ttft_s(self, wait: Wait, rate_rps: float, percentile: float) -> float:
        """TTFT at ``percentile`` of a pool whose wait is ``wait`` (inf when it is overloaded)."""
        ...

    def unservable_share(self, target_s: float) -> float:
        """Share of requests that miss ``target_s`` on any pool (counted and reported, not chased)."""
        ...

    def rules(self, rate_rps: float, target_s: float, percentile: float) -> tuple[Rule, ...]:
        """The rules a pool size is tried against for ``target_s``, in order; the last one's reasons stand
        when no size meets any."""
        ...


def prompt_times(model: SizingModel, engine: EngineModel, mix: LengthMix | None, isl_mean: float,
                 with_transfer: bool) -> PromptTimes:
    """The prompts' service times on ``engine``: over the mix's buckets, or exponential around ``isl_mean`` when
    no mix is known (the only place the two differ for sizing)."""
    if mix is None:
        return ExponentialPrompts.around(model, engine, isl_mean, with_transfer)
    return prefill_mix(model, engine, mix, isl_mean, with_transfer)


@dataclass(frozen=True)
class PrefillMix:
    """A mix of prompt lengths: each bucket's share and service times; TTFT and sizing over the whole mix."""

    weights: tuple[float, ...]
    service_s: tuple[float, ...]  # prefill time of each bucket's prompt on one replica
    fixed_s: tuple[float, ...]  # the rest of its TTFT: KV transfer + first decode step
    mean_s: float  # S: mean service time
    scv: float  # squared coefficient of variation of the service time

    def infeasible_share(self, target_s: float) -> float:
        """Share of requests whose own prefill (+ the rest) exceeds ``target_s``: they miss on any pool."""
        return sum(w for w, s, f in zip(self.weights, self.service_s, self.fixed_s, strict=True) if s + f > target_s)

    @property
    def mean_ttft_s(self) -> float:
        return sum(w * (x + f) for w, x, f in zip(self.weights, self.service_s, self.fixed_s, strict=True))

    def ttft_s(self, wait: Wait, rate_rps: float, percentile: float) -> float:
        """TTFT at ``percentile`` over the whole mix: the T whose miss share is the percentile's (bisection)."""
        if wait.utilisation >= min(1.0, MAX_UTILISATION + 0.05) and rate_rps > 0:
            return math.inf
        lo, hi = 0.0, max(s + f for s, f in zip(self.service_s, self.fixed_s, strict=True))
        while miss_share(self, wait, rate_rps, hi) > 1.0 - percentile:  # the wait's tail reaches beyond
            lo, hi = hi, hi * 2.0
            if hi > 1e6:
                return math.inf
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if miss_share(self, wait, rate_rps, mid) > 1.0 - percentile else (lo, mid)
        return hi

    def unservable_share(self, target_s: float) -> float:
        return self.infeasible_share(target_s)

    def rules(self, rate_rps: float, target_s: float, percentile: float) -> tuple[Rule, ...]:
        """One rule: the requests that miss by waiting stay within the queueing budget (reason sla_infeasible
        when the unservable ones alone break the percentile)."""
        infeasible = self.infeasible_share(target_s) >= 1.0 - percentile
        return (Rule(queueing_fits(self, rate_rps, target_s, percentile),
                     (Reason.SLA_INFEASIBLE,) if infeasible else ()),)


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


@dataclass(frozen=True)
class ExponentialPrompts:
    """Prompt lengths exponential around their mean (ISL_CV): the queue sees the mean prompt's service time and
    its spread, and the TTFT percentile is the wait's quantile plus the rest of TTFT of the prompt at the
    percentile (mean x -ln(1 - p): 3.0x the mean at p95), a sum of the two tails, which errs high."""

    mean_s: float
    scv: float
    at_percentile_s: float  # prefill + KV transfer + first step of the prompt at the percentile
    mean_ttft_s: float  # the same for the mean prompt

    @classmethod
    def around(cls, model: SizingModel, engine: EngineModel, isl_mean: float,
               with_transfer: bool) -> ExponentialPrompts:
        s, scv = _service(model, engine, isl_mean)
        isl = max(1.0, isl_mean)
        mean_ttft = s + model.itl_target_ms / 1e3 + (
            transfer_s(isl, model.kv_bytes_per_token, model.link_bytes_per_s) if with_transfer else 0.0)
        return cls(s, scv, _ttft_fixed_s(model, engine, isl_mean, with_transfer), mean_ttft)

    def ttft_s(self, wait: Wait, rate_rps: float, percentile: float) -> float:
        return wait.quantile_s + self.at_percentile_s

    def unservable_share(self, target_s: float) -> float:
        return 0.0  # a prompt at the percentile that alone misses the target makes the whole pool infeasible

    def rules(self, rate_rps: float, target_s: float, percentile: float) -> tuple[Rule, ...]:
        """The wait's quantile within what the prompt at the percentile leaves of the target; when nothing is
        left (or no pool gets the wait within it), the last resort: no queueing at the percentile, at most
        INFEASIBLE_UTILISATION busy (reason sla_infeasible). Adding no queueing on top of a prompt that alone
        misses is the limit of the feasible rule as the budget shrinks to 0, so longer prompts never get fewer
        replicas than slightly shorter, still-feasible ones (a plain utilisation cap gave 1 replica where 2
        met the SLA)."""
        budget_s = target_s - self.at_percentile_s
        meets = (Rule(lambda w: w.quantile_s <= budget_s),) if budget_s > 0 else ()
        return (*meets, Rule(lambda w: w.quantile_s <= 0.0 and w.utilisation <= INFEASIBLE_UTILISATION,
                             (Reason.SLA_INFEASIBLE,), last_resort=True))


def _isl_at(model: SizingModel, isl_mean: float) -> float:
    """ISL at the SLA percentile for exponentially distributed prompts: mean * -ln(1 - p)."""
    return isl_mean * -math.log(1.0 - model.percentile)


def _service(model: SizingModel, engine: EngineModel, isl_mean: float) -> tuple[float, float]:
    """Mean prefill service time and its squared coefficient of variation for exponential ISLs.

    The service time is affine in ISL (s = s0 + k * isl), so its variance is k^2 var(ISL) and its cv shrinks
    with the fixed part s0: a 150 ms prompt whose fixed part is 20 ms has cs^2 = (130/150)^2 = 0.75.
    """
    s = model.prefill_s(engine, max(1.0, isl_mean))
    s0 = model.prefill_s(engine, 1.0)
    variable = max(0.0, s - s0)
    return s, (variable / s) ** 2 * ISL_CV**2 if s > 0 else 0.0


def _ttft_fixed_s(model: SizingModel, engine: EngineModel, isl_mean: float, with_transfer: bool) -> float:
    """TTFT at the percentile without queueing: the prompt's compute, its KV transfer, the first decode step."""
    isl_p = _isl_at(model, isl_mean)
    t = model.prefill_s(engine, isl_p) + model.itl_target_ms / 1e3
    if with_transfer:
        t += transfer_s(isl_p, model.kv_bytes_per_token, model.link_bytes_per_s)
    return t
