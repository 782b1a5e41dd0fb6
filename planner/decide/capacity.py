"""SLA capacity model: how many replicas each pool needs for a load, and the latency a given size predicts.

Consistent with planner.perf.engine.EngineModel (the simulator's iteration model): a prompt's prefill
service time is the engine's chunked prefill time for its ISL, a decode step's time is the profile's ITL at
the replica's batch and the batch's mean context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.decide.prefill_mix import prefill_mix, queueing_fits, smallest_pool_for_mix, ttft_quantile_s
from planner.decide.queueing import Wait, smallest_pool, wait_at, wait_quantiles_s
from planner.decide.sizing_model import SizingModel
from planner.perf.engine import EngineModel
from planner.perf.kv import transfer_s
from planner.types import LengthMix, Reason

# Request ISLs are modelled as exponentially distributed around the forecast mean: it is the maximum-entropy
# choice for a known mean, and close to the Azure traces' tails (conv: mean 1,155, p99 4,142 = 3.6x mean;
# an exponential's p99 is 4.6x mean), so it errs on the safe side.
ISL_CV = 1.0
# Sizing for a hotter pool than this when the SLA cannot be met at all only builds unbounded queues.
INFEASIBLE_UTILISATION = 0.8


@dataclass(frozen=True)
class Load:
    rate_rps: float
    isl_tokens: float
    osl_tokens: float


@dataclass(frozen=True)
class Sizing:
    desired: float  # replicas the SLA model asks for (fractional before rounding up)
    replicas: int
    predicted_ms: float  # the pool's own latency (TTFT for prefill, ITL for decode) at `replicas`
    reasons: tuple[Reason, ...] = ()
    predicted_other_ms: float | None = None  # aggregated: ITL next to the TTFT in predicted_ms
    # Share of requests whose own prefill is longer than the TTFT target: no number of replicas serves them in
    # time, so they are counted (and reported) instead of chased.
    unservable_share: float = 0.0


# --------------------------------------------------------------------------------------------- prefill
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


def prefill_ttft_ms(model: SizingModel, load: Load, replicas: int, factor: float = 1.0,
                    mix: LengthMix | None = None) -> float:
    """Predicted TTFT at the SLA percentile for a prefill pool of ``replicas`` (inf when overloaded); with the
    prompt-length ``mix``, over its buckets (planner/decide/prefill_mix.py), else exponential around the mean."""
    if mix is not None:
        pm = prefill_mix(model, model.engine, mix, load.isl_tokens, True)
        return factor * 1e3 * ttft_quantile_s(pm, max(1, replicas) if load.rate_rps <= 0 else replicas,
                                              load.rate_rps, model.percentile)
    if load.rate_rps <= 0:
        return factor * 1e3 * _ttft_fixed_s(model, model.engine, max(1.0, load.isl_tokens), True)
    s, scv = _service(model, model.engine, load.isl_tokens)
    w = wait_at(replicas, load.rate_rps, s, scv, model.percentile)
    return factor * 1e3 * (w.quantile_s + _ttft_fixed_s(model, model.engine, load.isl_tokens, True))


def prefill_ttft_mean_ms(model: SizingModel, load: Load, replicas: int, mix: LengthMix | None = None,
                         aggregated: bool = False) -> float:
    """Predicted *mean* TTFT (wait + prefill + the rest) of a pool of ``replicas``: what an engine's exact
    _sum/_count gives, for calibration where its buckets cannot resolve a percentile. The mean M/G/c wait is
    C(c, a) x (1 + cs^2) / 2 / (c mu - lambda) (Allen-Cunneen)."""
    engine = model.aggregated if aggregated else model.engine
    if mix is not None:
        pm = prefill_mix(model, engine, mix, load.isl_tokens, not aggregated)
        s, scv = pm.mean_s, pm.scv
        fixed = sum(w * (x + f) for w, x, f in zip(pm.weights, pm.service_s, pm.fixed_s, strict=True))
    else:
        s, scv = _service(model, engine, max(1.0, load.isl_tokens))
        isl = max(1.0, load.isl_tokens)
        fixed = s + model.itl_target_ms / 1e3 + (0.0 if aggregated else transfer_s(
            isl, model.kv_bytes_per_token, model.link_bytes_per_s))
    w = wait_at(replicas, load.rate_rps, s, scv, model.percentile)
    if replicas <= 0 or w.utilisation >= 1.0:
        return math.inf
    drain = replicas / s - load.rate_rps if s > 0 else math.inf
    wait = w.p_wait * (1.0 + scv) / 2.0 / drain if drain > 0 and load.rate_rps > 0 else 0.0
    return 1e3 * (wait + fixed)


def prefill_ttft_table_ms(model: SizingModel, load: Load, max_replicas: int, factor: float = 1.0,
                          mix: LengthMix | None = None) -> list[float]:
    """Predicted TTFT for every prefill pool size 0..max_replicas (one pass; for the budget split)."""
    if mix is not None:
        return [prefill_ttft_ms(model, load, c, factor, mix) for c in range(max_replicas + 1)]
    if load.rate_rps <= 0:
        return [prefill_ttft_ms(model, load, 0, factor)] * (max_replicas + 1)
    s, scv = _service(model, model.engine, load.isl_tokens)
    fixed_s = _ttft_fixed_s(model, model.engine, load.isl_tokens, True)
    return [factor * 1e3 * (w + fixed_s) for w in wait_quantiles_s(max_replicas, load.rate_rps, s, scv,
                                                                    model.percentile)]


def size_prefill(model: SizingModel, load: Load, factor: float = 1.0, ceiling: int = 100_000,
                 mix: LengthMix | None = None) -> Sizing:
    """Smallest prefill pool whose TTFT percentile (queueing + compute + KV transfer + first step) meets the SLA."""
    if load.rate_rps <= 0:
        return Sizing(0.0, 0, prefill_ttft_ms(model, load, 0, factor, mix))
    if mix is not None:
        return _size_prefill_mix(model, load, factor, ceiling, mix)
    s, scv = _service(model, model.engine, load.isl_tokens)
    fixed_s = _ttft_fixed_s(model, model.engine, load.isl_tokens, True)
    budget_s = model.ttft_target_ms / 1e3 / factor - fixed_s
    reasons: list[Reason] = []
    w: Wait | None = None
    if budget_s > 0:
        w = smallest_pool(load.rate_rps, s, scv, model.percentile, lambda x: x.quantile_s <= budget_s,
                          ceiling=ceiling)
    if w is None:
        # The prompt alone misses the target, so no pool meets it; add no queueing on top. This is the limit of
        # the feasible rule as the budget shrinks to 0, so longer prompts never get fewer replicas than
        # slightly shorter, still-feasible ones (a plain utilisation cap gave 1 replica where 2 met the SLA).
        reasons.append(Reason.SLA_INFEASIBLE)
        w = smallest_pool(load.rate_rps, s, scv, model.percentile,
                          lambda x: x.quantile_s <= 0.0 and x.utilisation <= INFEASIBLE_UTILISATION,
                          ceiling=ceiling)
    if w is None:  # even the ceiling cannot keep up: ask for what throughput needs, the ceiling will clamp
        need = load.rate_rps * s / INFEASIBLE_UTILISATION
        return Sizing(need, math.ceil(need), math.inf, (*reasons,))
    return Sizing(float(w.servers), w.servers, factor * 1e3 * (w.quantile_s + fixed_s), (*reasons,))


def _size_prefill_mix(model: SizingModel, load: Load, factor: float, ceiling: int, mix: LengthMix) -> Sizing:
    """As size_prefill, over the prompt-length mix: requests no pool can serve in time are counted (reason
    sla_infeasible when they alone break the percentile), not chased."""
    pm = prefill_mix(model, model.engine, mix, load.isl_tokens, True)
    target_s = model.ttft_target_ms / 1e3 / factor
    unservable = pm.infeasible_share(target_s)
    reasons = (Reason.SLA_INFEASIBLE,) if unservable >= 1.0 - model.percentile else ()
    w = smallest_pool_for_mix(pm, load.rate_rps, target_s, model.percentile, ceiling)
    if w is None:  # even the ceiling cannot keep up: ask for what throughput needs, the ceiling will clamp
        need = load.rate_rps * pm.mean_s / INFEASIBLE_UTILISATION
        return Sizing(need, math.ceil(need), math.inf, reasons, unservable_share=unservable)
    predicted = factor * 1e3 * ttft_quantile_s(pm, w.servers, load.rate_rps, model.percentile)
    return Sizing(float(w.servers), w.servers, predicted, reasons, unservable_share=unservable)


# ---------------------------------------------------------------------------------------------- decode
def _context(load: Load) -> float:
    """Mean KV context of a sequence over its decode life: the prompt plus half the output."""
    return max(1.0, load.isl_tokens + load.osl_tokens / 2.0)


def _kv_context(load: Load) -> float:
    """KV a sequence holds at its end; engines reserve ISL + OSL at admission (no preemption)."""
    return max(1.0, load.isl_tokens + load.osl_tokens)


def kv_batch_limit(model: SizingModel, load: Load, mix: LengthMix | None = None) -> int:
    """Most sequences one decode replica's KV holds. With the prompt-length mix, the batch's total KV is a sum of
    unlike sequences: b of them hold b x mean + z x sqrt(b) x std at the SLA percentile (a batch of 100 from a
    mix with mean 12k and std 18k tokens needs 1.3 M tokens of KV, not 1.2 M), so the limit solves
    b m + z s sqrt(b) <= capacity."""
    curve = model.engine.decode
    if mix is None:
        return curve.kv_batch_limit(_kv_context(load))
    scaled = mix.scaled_to(max(1.0, load.isl_tokens))
    std = math.sqrt(sum(w * (t - scaled.mean) ** 2 for t, w in zip(scaled.tokens, scaled.weights, strict=True)))
    m, zs = _kv_context(load), max(0.0, model.z) * std
    root = (-zs + math.sqrt(zs * zs + 4.0 * m * curve.kv_capacity_tokens)) / (2.0 * m)
    return int(root * root)


def _largest_batch(model: SizingModel, engine: EngineModel, itl_ms: float, ctx: float) -> int:
    lo, hi = 0, engine.decode.max_batch
    while lo < hi:  # ITL is monotone in batch
        mid = (lo + hi + 1) // 2
        if model.itl_ms(engine, mid, ctx) <= itl_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo


def in_flight(model: SizingModel, load: Load, itl_ms: float) -> tuple[float, float]:
    """Sequences decoding at once (Little: rate x OSL x ITL) and that count at the SLA percentile.

    The number of requests in an M/G/inf system is Poisson whatever the service distribution, so the
    percentile adds z * sqrt(N): 1,000 sequences in flight at p95 need 1,052 slots.
    """
    n = load.rate_rps * load.osl_tokens * itl_ms / 1e3
    return n, n + model.z * math.sqrt(n)


def decode_batch(model: SizingModel, load: Load, replicas: int, start_itl_ms: float, factor: float = 1.0,
                 engine: EngineModel | None = None) -> tuple[float, float]:
    """(batch per replica at the percentile, its ITL) for a pool of ``replicas``.

    The batch sets the ITL and the ITL sets the concurrency (Little). Iterating from an ITL at or above the
    answer converges downward to the largest fixed point, so a truncated iteration errs high (safe), and
    every step is monotone in load and pool size: more load never predicts a smaller batch. ITLs here are
    the profile's (raw); sequences live ``OSL x factor x raw ITL`` (the calibrated ITL) for Little's law.
    """
    engine = engine or model.engine
    ctx = _context(load)
    itl = start_itl_ms
    batch = 1.0
    for _ in range(3):
        _, n_p = in_flight(model, load, factor * itl)
        batch = max(1.0, n_p / replicas)
        itl = model.itl_ms(engine, batch, ctx)
    return batch, itl


def decode_itl_ms(model: SizingModel, load: Load, replicas: int, factor: float = 1.0,
                  mix: LengthMix | None = None) -> float:
    """Predicted ITL at the SLA percentile (the batch at the percentile's concurrency) for ``replicas``."""
    if load.rate_rps <= 0:
        return factor * model.itl_ms(model.engine, 1, _context(load))
    if replicas <= 0:
        return math.inf
    batch, itl = decode_batch(model, load, replicas, max(model.itl_target_ms / factor, 1e-3), factor)
    if batch > min(model.engine.decode.max_batch, kv_batch_limit(model, load, mix)):
        return math.inf
    return factor * itl


def size_decode(model: SizingModel, load: Load, factor: float = 1.0, ceiling: int = 100_000,
                mix: LengthMix | None = None) -> Sizing:
    """Smallest decode pool whose batch at the percentile's concurrency meets the ITL target and fits the KV.

    The batch limit per replica is the largest batch whose ITL at the forecast context meets the target
    (after calibration) and whose KV (ISL + OSL per sequence) fits; concurrency is Little's rate x OSL x ITL.
    """
    if load.rate_rps <= 0:
        return Sizing(0.0, 0, decode_itl_ms(model, load, 0, factor, mix))
    curve, ctx = model.engine.decode, _context(load)
    reasons: list[Reason] = []
    budget_ms = model.itl_target_ms / factor
    b_itl = _largest_batch(model, model.engine, budget_ms, ctx)
    b_kv = kv_batch_limit(model, load, mix)
    if b_itl == 0:
        reasons.append(Reason.SLA_INFEASIBLE)
        b_itl = 1  # the lowest ITL the profile offers
        budget_ms = model.itl_ms(model.engine, 1, ctx)
    if b_kv < b_itl:
        reasons.append(Reason.KV_BOUND)
    limit = max(1, min(b_itl, b_kv))
    if curve.itl_ms(limit, ctx).extrapolated:
        reasons.append(Reason.EXTRAPOLATED)

    def fits(c: int) -> bool:
        return decode_batch(model, load, c, budget_ms, factor)[0] <= limit

    _, n_p = in_flight(model, load, factor * budget_ms)
    hi = max(1, math.ceil(n_p / limit))  # at this size the first step already fits, and later ones shrink
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    replicas = min(hi, ceiling)
    return Sizing(float(replicas), replicas, decode_itl_ms(model, load, replicas, factor, mix), (*reasons,))


# ------------------------------------------------------------------------------------------ aggregated
def aggregated_latency_ms(model: SizingModel, load: Load, replicas: int, ttft_factor: float = 1.0,
                          itl_factor: float = 1.0, mix: LengthMix | None = None) -> tuple[float, float]:
    """(TTFT, ITL) at the percentile for an aggregated pool: prefill chunks ride on decode steps.

    A replica spends the share ``u = rate/c x prefill time`` of its time on prompts; decode steps stretch by
    1/(1-u), and a prompt waits for a free slot of the replica's prefill capacity (M/G/c with the prefill
    service time).
    """
    engine = model.aggregated
    if replicas <= 0:
        return math.inf, math.inf
    pm = prefill_mix(model, engine, mix, load.isl_tokens, False) if mix is not None else None
    s, scv = (pm.mean_s, pm.scv) if pm is not None else _service(model, engine, max(1.0, load.isl_tokens))
    u = load.rate_rps * s / replicas
    if u >= 1.0:
        return math.inf, math.inf
    batch, itl = decode_batch(model, load, replicas, max(model.itl_target_ms / itl_factor, 1e-3), itl_factor,
                             engine)
    if batch > min(engine.decode.max_batch, engine.decode.kv_batch_limit(_kv_context(load))):
        return math.inf, math.inf
    itl = itl / (1.0 - u)
    if pm is not None:
        return ttft_factor * 1e3 * ttft_quantile_s(pm, replicas, load.rate_rps, model.percentile), itl_factor * itl
    w = wait_at(replicas, load.rate_rps, s, scv, model.percentile)
    ttft = 1e3 * (w.quantile_s + _ttft_fixed_s(model, engine, load.isl_tokens, False))
    return ttft_factor * ttft, itl_factor * itl


def size_aggregated(model: SizingModel, load: Load, ttft_factor: float = 1.0, itl_factor: float = 1.0,
                    ceiling: int = 100_000, mix: LengthMix | None = None) -> Sizing:
    if load.rate_rps <= 0:
        t, i = aggregated_latency_ms(model, load, 1, ttft_factor, itl_factor, mix)
        return Sizing(0.0, 0, t, (), i)
    if mix is not None:
        return _size_aggregated_mix(model, load, ttft_factor, itl_factor, ceiling, mix)
    engine, ctx = model.aggregated, _context(load)
    b = max(1, min(_largest_batch(model, engine, model.itl_target_ms / itl_factor, ctx),
                   engine.decode.kv_batch_limit(_kv_context(load))))
    s, _ = _service(model, engine, load.isl_tokens)
    _, n_p = in_flight(model, load, itl_factor * model.itl_ms(engine, 1, ctx))
    start = max(1, math.ceil(n_p / b), math.ceil(load.rate_rps * s))
    for c in range(start, ceiling + 1):
        t, i = aggregated_latency_ms(model, load, c, ttft_factor, itl_factor)
        if t <= model.ttft_target_ms and i <= model.itl_target_ms:
            return Sizing(float(c), c, t, (), i)
    need = max(float(start), load.rate_rps * s / INFEASIBLE_UTILISATION)
    return Sizing(need, math.ceil(need), math.inf, (Reason.SLA_INFEASIBLE,), math.inf)


def _size_aggregated_mix(model: SizingModel, load: Load, ttft_factor: float, itl_factor: float, ceiling: int,
                         mix: LengthMix) -> Sizing:
    """As size_aggregated, with TTFT judged over the prompt-length mix (prefill_mix.queueing_fits)."""
    engine, ctx = model.aggregated, _context(load)
    pm = prefill_mix(model, engine, mix, load.isl_tokens, False)
    target_s = model.ttft_target_ms / 1e3 / ttft_factor
    reasons = (Reason.SLA_INFEASIBLE,) if pm.infeasible_share(target_s) >= 1.0 - model.percentile else ()
    fits = queueing_fits(pm, load.rate_rps, target_s, model.percentile)
    b = max(1, min(_largest_batch(model, engine, model.itl_target_ms / itl_factor, ctx),
                   engine.decode.kv_batch_limit(_kv_context(load))))
    _, n_p = in_flight(model, load, itl_factor * model.itl_ms(engine, 1, ctx))
    start = max(1, math.ceil(n_p / b), math.ceil(load.rate_rps * pm.mean_s))
    for c in range(start, ceiling + 1):
        t, i = aggregated_latency_ms(model, load, c, ttft_factor, itl_factor, mix)
        if i <= model.itl_target_ms and fits(wait_at(c, load.rate_rps, pm.mean_s, pm.scv, model.percentile)):
            return Sizing(float(c), c, t, reasons, i, pm.infeasible_share(target_s))
    need = max(float(start), load.rate_rps * pm.mean_s / INFEASIBLE_UTILISATION)
    return Sizing(need, math.ceil(need), math.inf, (Reason.SLA_INFEASIBLE,), math.inf)
