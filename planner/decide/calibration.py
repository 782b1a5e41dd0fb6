"""Calibration: a bounded correction of the profile from observed vs predicted latency at the observed load.

The factor multiplies the model's latency prediction, so it can raise capacity (observed slower than the
profile: factor > 1) as well as lower it (observed faster: factor < 1). It is bounded to
[1/max_factor, max_factor] and decays toward 1 with ``half_life_s`` when no new evidence arrives, so a
transient (a cold cache, a noisy window) cannot pin the pool forever. Worked example: the profile predicts
a 20 ms ITL at the observed batch and 26 ms is observed; one sample moves the factor from 1.0 to
sqrt(1.3) = 1.14 (each sample carries half the weight), the next one to 1.22, and so on toward 1.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.config import Calibration
from planner.decide.capacity import (
    Load,
    aggregated_latency_ms,
    context_spread,
    percentile_batch,
    percentile_context,
    prefill_ttft_mean_ms,
    prefill_ttft_ms,
)
from planner.decide.demand import ISL_SOURCES, OSL_SOURCES, finite, mean_length
from planner.decide.spec import DeciderSpec
from planner.decide.state import Calibrated, PlannerState
from planner.types import Decision, LengthMix, Mode, Observation, Pool, Reason

SAMPLE_WEIGHT = 0.5  # weight of a new observation against the decayed history (in log space)
MIN_REQUESTS = 20  # a window with fewer requests gives too noisy a percentile to learn from


def current(cal: Calibrated, now_s: float, cfg: Calibration) -> float:
    """The factor at ``now_s``: its log decays toward 0 with the configured half-life."""
    if not cfg.enabled or cal.at_s is None or cal.factor <= 0:
        return 1.0
    age = max(0.0, now_s - cal.at_s)
    return math.exp(math.log(cal.factor) * 0.5 ** (age / cfg.half_life_s))


def update(cal: Calibrated, observed_ms: float | None, predicted_ms: float, now_s: float,
           cfg: Calibration) -> Calibrated:
    """Blend one observed/predicted ratio into the factor (no change without a usable sample)."""
    if not cfg.enabled or observed_ms is None or not math.isfinite(observed_ms) or observed_ms <= 0:
        return cal
    if not math.isfinite(predicted_ms) or predicted_ms <= 0:
        return cal
    lo, hi = 1.0 / cfg.max_factor, cfg.max_factor
    ratio = min(hi, max(lo, observed_ms / predicted_ms))
    prior = current(cal, now_s, cfg)
    blended = math.exp((1 - SAMPLE_WEIGHT) * math.log(prior) + SAMPLE_WEIGHT * math.log(ratio))
    return Calibrated(min(hi, max(lo, blended)), now_s, cal.samples + 1)


# ----------------------------------------------------------------------------------- stage 2 of decide()
@dataclass(frozen=True)
class Factors:
    """The calibration factors in force this tick (1.0: trust the profile)."""

    ttft: float = 1.0
    itl: float = 1.0

    @classmethod
    def of(cls, decision: Decision | None) -> Factors | None:
        """The factors a decision sized with (its detail's ``ttft_factor`` and ``itl_factor``); None for a decision
        that did not size (a hold records none)."""
        detail = decision.detail if decision is not None else {}
        ttft, itl = detail.get("ttft_factor"), detail.get("itl_factor")
        if not isinstance(ttft, float | int) or not isinstance(itl, float | int):
            return None
        return cls(float(ttft), float(itl))

    def reasons_for(self, pool: Pool) -> tuple[Reason, ...]:
        """calibrated_up/down for the factors that size ``pool``."""
        applied = {Pool.PREFILL: (self.ttft,), Pool.DECODE: (self.itl,)}.get(pool, (self.ttft, self.itl))
        return tuple(r for f in applied for r in _direction(f))


def _direction(factor: float) -> tuple[Reason, ...]:
    if factor > 1.0 + 1e-3:
        return (Reason.CALIBRATED_UP,)
    if factor < 1.0 - 1e-3:
        return (Reason.CALIBRATED_DOWN,)
    return ()


def calibrate(spec: DeciderSpec, obs: Observation, state: PlannerState, now_s: float) -> tuple[Factors, PlannerState]:
    """Learn from the window just observed (its TTFT/ITL at its own load and size vs the model's prediction),
    then return the factors in force now and the state that remembers them."""
    cfg = spec.policy.calibration
    state, itl_settled = _one_size(spec.mode.itl_pool, obs, state, now_s)
    if cfg.enabled:
        learned = dict(state.calibration)
        isl = mean_length(obs, "isl_mean", ISL_SOURCES)
        osl = mean_length(obs, "osl_mean", OSL_SOURCES)
        ttft = _learn_ttft(spec, obs, isl, osl, state, now_s)
        itl = _learn_itl(spec, obs, isl, osl, state, now_s) if itl_settled else None
        learned.update({k: v for k, v in (("ttft", ttft), ("itl", itl)) if v is not None})
        state = replace(state, calibration=learned)
    return Factors(current(state.factor("ttft"), now_s, cfg), current(state.factor("itl"), now_s, cfg)), state


def _one_size(pool: Pool, obs: Observation, state: PlannerState, now_s: float) -> tuple[PlannerState, bool]:
    """(the state with ``pool``'s ready replicas and since when they have been that many, whether the whole
    observed window was served at that size).

    Why: the ITL of a window that straddles a change of the decode pool's size is the old size's in part, and
    calibration compares it with the new size's prediction (the ready gauge is read at the window's end). After
    a scale-up that read as a model error: on ServeGen hour 15, decode's ITL factor rose from 1.03 to 1.29 the
    tick its second replica became ready, the half-life kept it, and the pool asked for two replicas where one
    met the target. Unknown history (the first tick, a state from before) counts as one size, as before. TTFT is
    not held to this: the same rule for prefill lost seeds of azure-code and chat-docs (README)."""
    po = obs.pools.get(pool)
    if po is None or po.ready_replicas is None:
        return state, True
    mem = state.pool(pool)
    ready = int(po.ready_replicas)
    if mem.ready != ready:
        mem = replace(mem, ready=ready, ready_since_s=None if mem.ready is None else now_s)
        state = state.with_pool(pool, mem)
    return state, mem.ready_since_s is None or now_s - mem.ready_since_s >= obs.window_s


def _learn_ttft(spec: DeciderSpec, obs: Observation, isl: float | None, osl: float | None, state: PlannerState,
                now_s: float) -> Calibrated | None:
    po = obs.pools.get(spec.mode.ttft_pool)
    if po is None or isl is None or po.requests < MIN_REQUESTS or (po.ready_replicas or 0) <= 0:
        return None
    ready = int(po.ready_replicas or 0)
    if po.queue > 0.5 * ready:  # a backlog left by an earlier overload is not a model error: learn when steady
        return None
    load = Load(po.rate_rps, isl, osl or 1.0)
    mix = LengthMix.from_buckets(po.isl_buckets)  # the window's own prompts, as it was served
    if po.ttft_p95_resolved is False:
        # The histogram's buckets cannot resolve a p95 near the target (vLLM's TTFT has a 0.1-0.25 s bucket):
        # compare exact means instead (the engines' _sum/_count), observed against predicted.
        observed, predicted = finite(po.ttft_ms_mean), prefill_ttft_mean_ms(spec.model, load, ready, mix=mix,
                                                                            aggregated=spec.mode is Mode.AGGREGATED)
    elif spec.mode is Mode.AGGREGATED:
        observed, predicted = finite(po.ttft_ms_at_sla), aggregated_latency_ms(spec.model, load, ready, mix=mix)[0]
    else:
        observed, predicted = finite(po.ttft_ms_at_sla), prefill_ttft_ms(spec.model, load, ready, mix=mix)
    return update(state.factor("ttft"), observed, predicted, now_s, spec.policy.calibration)


def _learn_itl(spec: DeciderSpec, obs: Observation, isl: float | None, osl: float | None, state: PlannerState,
               now_s: float) -> Calibrated | None:
    do = obs.pools.get(spec.mode.itl_pool)
    if do is None or (do.ready_replicas or 0) <= 0 or do.running <= 0 or isl is None or osl is None:
        return None
    ready = int(do.ready_replicas or 0)
    batch = max(1.0, do.running / ready)
    # The ITL percentile covers the whole window while ``running`` is a gauge read at its end: learn only when
    # the gauge agrees (within 30 %) with the window's mean batch by Little (rate x OSL x ITL).
    little = do.rate_rps * osl * (finite(do.itl_ms_mean) or 0.0) / 1e3 / ready
    steady = little > 0 and abs(batch - little) <= 0.3 * max(batch, little)
    if not steady or not (do.requests >= MIN_REQUESTS or do.running >= MIN_REQUESTS):
        return None
    # vLLM's ITL buckets (10, 25, 50 ms) read a p95 near a 40 ms target with ~50 % error; the mean is exact.
    by_mean = do.itl_p95_resolved is False
    observed = do.itl_ms_mean if by_mean else do.itl_ms_at_sla
    if spec.mode is Mode.AGGREGATED:
        predicted = aggregated_latency_ms(spec.model, Load(do.rate_rps, isl, osl), ready)[1]
    else:
        # Like with like: a mean against the step at the mean batch, the percentile against the step at the
        # percentile's batch (the pool's concurrency is Poisson: running + z sqrt(running), as the sizing
        # assumes). Comparing the percentile with the mean batch's step read the batch's own fluctuation as a
        # model error (factor ~1.2) that the sizing then counted a second time.
        # The percentile's step is also at the percentile's context (capacity.percentile_context): the window's
        # own prompt mix sets how far the batch's total context strays from the mean.
        if by_mean:
            at, ctx = batch, isl + osl / 2.0
        else:
            at = percentile_batch(spec.model, do.running, ready)
            load = Load(do.rate_rps, isl, osl)
            ctx = percentile_context(spec.model, load, at, context_spread(load, LengthMix.from_buckets(do.isl_buckets)))
        predicted = spec.model.engine.decode.itl_ms(at, ctx).value
    return update(state.factor("itl"), finite(observed), predicted, now_s, spec.policy.calibration)
