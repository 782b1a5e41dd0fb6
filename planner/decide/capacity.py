"""SLA capacity model: how many replicas each pool needs for a load, and the latency a given size predicts.

Consistent with planner.perf.engine.EngineModel (the simulator's iteration model): a prompt's prefill
service time is the engine's chunked prefill time for its ISL, a decode step's time is the profile's ITL at
the replica's batch and the batch's mean context.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.decide.prefill_mix import PromptTimes, prompt_times
from planner.decide.queueing import (
    INFEASIBLE_UTILISATION,
    Wait,
    smallest_meeting,
    smallest_pool,
    wait_at,
    waits,
)
from planner.decide.sizing_model import SizingModel
from planner.perf.engine import EngineModel
from planner.types import LengthMix, Reason


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
def _prefill_prompts(model: SizingModel, load: Load, mix: LengthMix | None) -> PromptTimes:
    # At zero load the exponential's prompt at the percentile has always been floored at one token (a mix is).
    isl = load.isl_tokens if load.rate_rps > 0 else max(1.0, load.isl_tokens)
    return prompt_times(model, model.engine, mix, isl, True)


def prefill_ttft_ms(model: SizingModel, load: Load, replicas: int, factor: float = 1.0,
                    mix: LengthMix | None = None) -> float:
    """Predicted TTFT at the SLA percentile for a prefill pool of ``replicas`` (inf when overloaded); over the
    prompt-length ``mix`` (planner/decide/prefill_mix.py), else exponential around the mean. At zero load a
    pool of at least one replica serves the prompt without waiting."""
    prompts = _prefill_prompts(model, load, mix)
    servers = max(1, replicas) if load.rate_rps <= 0 else replicas
    wait = wait_at(servers, load.rate_rps, prompts.mean_s, prompts.scv, model.percentile)
    return factor * 1e3 * prompts.ttft_s(wait, load.rate_rps, model.percentile)


def prefill_ttft_mean_ms(model: SizingModel, load: Load, replicas: int, mix: LengthMix | None = None,
                         aggregated: bool = False) -> float:
    """Predicted *mean* TTFT (wait + prefill + the rest) of a pool of ``replicas``: what an engine's exact
    _sum/_count gives, for calibration where its buckets cannot resolve a percentile. The mean M/G/c wait is
    C(c, a) x (1 + cs^2) / 2 / (c mu - lambda) (Allen-Cunneen)."""
    engine = model.aggregated if aggregated else model.engine
    prompts = prompt_times(model, engine, mix, load.isl_tokens, not aggregated)
    s, scv = prompts.mean_s, prompts.scv
    w = wait_at(replicas, load.rate_rps, s, scv, model.percentile)
    if replicas <= 0 or w.utilisation >= 1.0:
        return math.inf
    drain = replicas / s - load.rate_rps if s > 0 else math.inf
    wait = w.p_wait * (1.0 + scv) / 2.0 / drain if drain > 0 and load.rate_rps > 0 else 0.0
    return 1e3 * (wait + prompts.mean_ttft_s)


def prefill_ttft_table_ms(model: SizingModel, load: Load, max_replicas: int, factor: float = 1.0,
                          mix: LengthMix | None = None) -> list[float]:
    """Predicted TTFT for every prefill pool size 0..max_replicas (one pass; for the budget split)."""
    if load.rate_rps <= 0:
        return [prefill_ttft_ms(model, load, 1, factor, mix)] * (max_replicas + 1)
    prompts = _prefill_prompts(model, load, mix)
    return [factor * 1e3 * prompts.ttft_s(w, load.rate_rps, model.percentile)
            for w in waits(max_replicas, load.rate_rps, prompts.mean_s, prompts.scv, model.percentile)]


def size_prefill(model: SizingModel, load: Load, factor: float = 1.0, ceiling: int = 100_000,
                 mix: LengthMix | None = None) -> Sizing:
    """Smallest prefill pool whose TTFT percentile (queueing + compute + KV transfer + first step) meets the SLA.

    The prompts' rules are tried in order (prefill_mix.py): the first pool size that meets one is the answer.
    Requests no pool can serve in time are counted (unservable_share), not chased; when no size meets any rule,
    the pool asks for what throughput needs and the ceiling clamps it.
    """
    if load.rate_rps <= 0:
        return Sizing(0.0, 0, prefill_ttft_ms(model, load, 0, factor, mix))
    prompts = _prefill_prompts(model, load, mix)
    target_s = model.ttft_target_ms / 1e3 / factor
    unservable = prompts.unservable_share(target_s)
    rules = prompts.rules(load.rate_rps, target_s, model.percentile)
    for rule in rules:
        w = smallest_pool(load.rate_rps, prompts.mean_s, prompts.scv, model.percentile, rule.fits, ceiling=ceiling)
        if w is not None:
            predicted = factor * 1e3 * prompts.ttft_s(w, load.rate_rps, model.percentile)
            return Sizing(float(w.servers), w.servers, predicted, rule.reasons, unservable_share=unservable)
    need = load.rate_rps * prompts.mean_s / INFEASIBLE_UTILISATION
    return Sizing(need, math.ceil(need), math.inf, rules[-1].reasons, unservable_share=unservable)


# ---------------------------------------------------------------------------------------------- decode
def _context(load: Load) -> float:
    """Mean KV context of a sequence over its decode life: the prompt plus half the output."""
    return max(1.0, load.isl_tokens + load.osl_tokens / 2.0)


def context_spread(load: Load, mix: LengthMix | None) -> float:
    """Standard deviation of one sequence's context: the prompt-length mix's, moved to the load's mean prompt
    (0 without a mix: every sequence at the mean)."""
    if mix is None:
        return 0.0
    scaled = mix.scaled_to(max(1.0, load.isl_tokens))
    return math.sqrt(sum(w * (t - scaled.mean) ** 2 for t, w in zip(scaled.tokens, scaled.weights, strict=True)))


def percentile_context(model: SizingModel, load: Load, batch: float, spread: float) -> float:
    """Mean context per sequence of a batch at the SLA percentile, ``batch`` being the percentile's batch.

    Why: a decode step reads every sequence's KV, so its time follows the batch's total context, and with
    unlike prompts that total strays from the mean as the batch's members change. The sequences in flight
    are Poisson (mean n, so ``b = n + z sqrt(n)``), each with a context of mean m and std s (``spread``), so
    the total is compound Poisson: variance ``n (m^2 + s^2)``, and at the percentile ``n m + z sqrt(n)
    sqrt(m^2 + s^2)``. Spread over the percentile's b sequences that is ``m + z sqrt(n) (sqrt(m^2 + s^2) - m) /
    b``: m itself when every prompt is alike, so the batch's own fluctuation is counted once, as before.

    Measured (realised p95 ITL over the profile's step at the percentile's batch, median of the calibration's
    windows, seed 0): at the mean context chat-docs read 1.34x (80 % 1k-token chats, 20 % 32k-token documents:
    std 15k tokens about a 7.3k mean), long-lognormal 1.12x, servegen 1.03x, azure-conv 1.02x; at this
    context 1.24x, 1.05x, 1.02x and 1.02x (chat-docs' documents also answer twice as long, so they are more of
    the running batch than of the arrivals: no engine metric says so). The calibration factor had made the
    difference up, and through Little's law it also swelled the batch the sizing predicted."""
    b, m, z = max(1.0, batch), _context(load), model.z
    n = ((-z + math.sqrt(z * z + 4.0 * b)) / 2.0) ** 2 if z > 0 else b  # the mean batch whose percentile is b
    return max(1.0, m + z * math.sqrt(n) * (math.hypot(m, spread) - m) / b)


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
    m, zs = _kv_context(load), max(0.0, model.z) * context_spread(load, mix)
    root = (-zs + math.sqrt(zs * zs + 4.0 * m * curve.kv_capacity_tokens)) / (2.0 * m)
    return int(root * root)


def _largest_batch(model: SizingModel, engine: EngineModel, itl_ms: float, load: Load, spread: float = 0.0) -> int:
    lo, hi = 0, engine.decode.max_batch
    while lo < hi:  # ITL is monotone in batch (the percentile's total context b m + z s sqrt(b) grows with b)
        mid = (lo + hi + 1) // 2
        if model.itl_ms(engine, mid, percentile_context(model, load, mid, spread)) <= itl_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo


_FIXED_POINT_STEPS = 200  # the iteration settles in under 20 steps unless the ITL nearly doubles with the batch
_FIXED_POINT_TOLERANCE = 1e-3
_BATCH_BEYOND_ANY_ENGINE = 1e7


def in_flight(model: SizingModel, load: Load, itl_ms: float) -> tuple[float, float]:
    """Sequences decoding at once (Little: rate x OSL x ITL) and that count at the SLA percentile.

    The number of requests in an M/G/inf system is Poisson whatever the service distribution, so the
    percentile adds z * sqrt(N): 1,000 sequences in flight at p95 need 1,052 slots.
    """
    n = load.rate_rps * load.osl_tokens * itl_ms / 1e3
    return n, n + model.z * math.sqrt(n)


def percentile_batch(model: SizingModel, running: float, replicas: int) -> float:
    """Batch per replica at the SLA percentile when ``running`` sequences decode on average (Poisson)."""
    return max(1.0, (running + model.z * math.sqrt(max(0.0, running))) / max(1, replicas))


def decode_batch(model: SizingModel, load: Load, replicas: int, start_itl_ms: float, factor: float = 1.0,
                 engine: EngineModel | None = None, spread: float = 0.0) -> tuple[float, float]:
    """(batch per replica at the percentile, its ITL) for a pool of ``replicas``.

    The batch sets the ITL and the ITL sets the concurrency (Little): the answer is a fixed point of
    ``b -> n_p(factor x ITL(b)) / replicas``. The map is increasing in b, so iterating from an ITL at or
    above the answer descends to the largest fixed point; it is iterated until it settles (to 0.1 % of a
    sequence), because a few steps from the ITL target stop far above the answer when the pool runs well
    below its target (KV-bound, or at a floor): three steps predicted 14 ms where 8.5 ms was realised. Every
    step is monotone in load and pool size, so more load never predicts a smaller batch. ITLs here are the
    profile's (raw); sequences live ``OSL x factor x raw ITL`` (the calibrated ITL) for Little's law. The
    iteration runs at the mean context (how long sequences live); the ITL returned is the settled batch's at
    the percentile's context (``percentile_context``; ``spread`` 0: the mean's).
    """
    engine = engine or model.engine
    ctx = _context(load)
    itl = start_itl_ms
    batch = math.inf
    for _ in range(_FIXED_POINT_STEPS):
        _, n_p = in_flight(model, load, factor * itl)
        nxt = max(1.0, n_p / replicas)
        settled = abs(batch - nxt) <= _FIXED_POINT_TOLERANCE * nxt
        batch = nxt
        if batch > _BATCH_BEYOND_ANY_ENGINE:  # diverging from below the answer: no batch serves this load
            return batch, math.inf
        itl = model.itl_ms(engine, batch, ctx)
        if settled:
            break
    return batch, itl if spread <= 0 else model.itl_ms(engine, batch, percentile_context(model, load, batch, spread))


def decode_itl_ms(model: SizingModel, load: Load, replicas: int, factor: float = 1.0,
                  mix: LengthMix | None = None) -> float:
    """Predicted ITL at the SLA percentile (the batch at the percentile's concurrency) for ``replicas``."""
    spread = context_spread(load, mix)
    if load.rate_rps <= 0:
        return factor * model.itl_ms(model.engine, 1, percentile_context(model, load, 1, spread))
    if replicas <= 0:
        return math.inf
    batch, itl = decode_batch(model, load, replicas, max(model.itl_target_ms / factor, 1e-3), factor,
                              spread=spread)
    if batch > min(model.engine.decode.max_batch, kv_batch_limit(model, load, mix)):
        return math.inf
    return factor * itl


def _decode_limit(model: SizingModel, load: Load, factor: float,
                  mix: LengthMix | None) -> tuple[int, float, int, bool, tuple[Reason, ...], float]:
    """(batch per replica, the ITL budget it is held to, the KV's batch limit, whether even a batch of one
    misses the target, the reasons, the context spread) for a decode replica at ``load``'s context after
    calibration."""
    curve, spread = model.engine.decode, context_spread(load, mix)
    reasons: list[Reason] = []
    budget_ms = model.itl_target_ms / factor
    b_itl = _largest_batch(model, model.engine, budget_ms, load, spread)
    b_kv = kv_batch_limit(model, load, mix)
    itl_bound_by_one = b_itl == 0
    if itl_bound_by_one:
        reasons.append(Reason.SLA_INFEASIBLE)
        b_itl = 1  # the lowest ITL the profile offers
        budget_ms = model.itl_ms(model.engine, 1, percentile_context(model, load, 1, spread))
    if b_kv < b_itl:
        reasons.append(Reason.KV_BOUND)
    limit = max(1, min(b_itl, b_kv))
    if curve.itl_ms(limit, percentile_context(model, load, limit, spread)).extrapolated:
        reasons.append(Reason.EXTRAPOLATED)
    return limit, budget_ms, b_kv, itl_bound_by_one, tuple(reasons), spread


def decode_batch_limit(model: SizingModel, load: Load, factor: float = 1.0, mix: LengthMix | None = None) -> int:
    """The most sequences one decode replica runs at ``load``'s context within the ITL target (after
    calibration) and its KV: what the pool is sized to hold per replica."""
    return _decode_limit(model, load, factor, mix)[0]


def held_over_target(load: Load, running: float, ready: int, horizon_s: float, limit: int) -> tuple[Load, float]:
    """(``load`` with the sequences running beyond what ``ready`` replicas of ``limit`` sequences each hold at the
    ITL target added as a backlog that drains over ``horizon_s``, that excess).

    Why: the output length engines export is observed when a request *ends* (vLLM's
    request_generation_tokens), so while a pool runs far over its batch only short answers finish and the
    mean read is a fraction of the real one (`planner up`: 65 read against 262 sent, 700 sequences on one
    replica at 40x the ITL target, and the pool sized to one replica for minutes). Throughput cannot say what
    the demand is either: an overloaded pool's tokens/s is its capacity. What is known for sure is that the
    excess sequences are served over the ITL target: like requests waiting in the queue (vLLM queues only
    past ``max_num_seqs``, usually far above the batch that meets the target), they are a backlog.
    """
    excess = running - ready * limit if ready > 0 and running > 0 and horizon_s > 0 else 0.0
    if excess <= 0:
        return load, 0.0
    return Load(load.rate_rps + excess / horizon_s, load.isl_tokens, load.osl_tokens), excess


def size_decode(model: SizingModel, load: Load, factor: float = 1.0, ceiling: int = 100_000,
                mix: LengthMix | None = None, held: tuple[float, int, float] | None = None) -> Sizing:
    """Smallest decode pool whose batch at the percentile's concurrency meets the ITL target and fits the KV.

    The batch limit per replica is the largest batch whose ITL at the forecast context meets the target
    (after calibration) and whose KV (ISL + OSL per sequence) fits; concurrency is Little's rate x OSL x ITL.
    ``held``: (sequences running now, ready replicas, horizon s); those beyond the ready replicas' batch limit
    are a backlog (``held_over_target``, reason decode_over_batch).
    """
    limit, budget_ms, b_kv, itl_bound_by_one, limit_reasons, spread = _decode_limit(model, load, factor, mix)
    if held is not None:  # the limit depends on the context alone, so a backlog added to the rate keeps it
        load, excess = held_over_target(load, *held, limit)
        limit_reasons += (Reason.DECODE_OVER_BATCH,) if excess > 0 else ()
    if load.rate_rps <= 0:
        return Sizing(0.0, 0, decode_itl_ms(model, load, 0, factor, mix))

    def fits(c: int) -> bool:
        # The ITL itself against the budget, not the batch against the largest whole batch meeting it: the
        # settled batch is fractional, and 313.01 against a whole 313 rejected a pool at 39.99 ms of 40.
        batch, itl = decode_batch(model, load, c, budget_ms, factor, spread=spread)
        return batch <= limit if itl_bound_by_one else (batch <= b_kv and itl <= budget_ms)

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
    return Sizing(float(replicas), replicas, decode_itl_ms(model, load, replicas, factor, mix), limit_reasons)


def kv_replicas(model: SizingModel, load: Load, factor: float = 1.0, mix: LengthMix | None = None,
                held: tuple[float, int, float] | None = None, ceiling: int = 100_000) -> int:
    """Smallest decode pool whose KV holds the batch at the percentile's concurrency, whatever its ITL: where a
    replica short of its ITL target runs slower steps, one short of KV admits nothing (the KV guard, size.py)."""
    _, _, b_kv, _, _, spread = _decode_limit(model, load, factor, mix)
    if held is not None:
        load, _ = held_over_target(load, *held, b_kv)
    if load.rate_rps <= 0:
        return 0

    def holds(c: int) -> bool:
        return decode_batch(model, load, c, model.itl_target_ms / factor, factor, spread=spread)[0] <= b_kv

    return smallest_meeting(holds, 1, ceiling) or ceiling


# ------------------------------------------------------------------------------------------ aggregated
def aggregated_latency_ms(model: SizingModel, load: Load, replicas: int, ttft_factor: float = 1.0,
                          itl_factor: float = 1.0, mix: LengthMix | None = None) -> tuple[float, float]:
    """(TTFT, ITL) at the percentile for an aggregated pool: prefill chunks ride on decode steps.

    A replica spends the share ``u = rate/c x prefill time`` of its time on prompts; decode steps stretch by
    1/(1-u), and a prompt waits for a free slot of the replica's prefill capacity (M/G/c with the prefill
    service time).
    """
    if replicas <= 0:
        return math.inf, math.inf
    prompts = prompt_times(model, model.aggregated, mix, load.isl_tokens, False)
    itl = _aggregated_itl_ms(model, load, replicas, itl_factor, prompts)
    if itl is None:
        return math.inf, math.inf
    wait = wait_at(replicas, load.rate_rps, prompts.mean_s, prompts.scv, model.percentile)
    return ttft_factor * 1e3 * prompts.ttft_s(wait, load.rate_rps, model.percentile), itl


def _aggregated_itl_ms(model: SizingModel, load: Load, replicas: int, itl_factor: float,
                       prompts: PromptTimes) -> float | None:
    """ITL at the percentile of an aggregated pool of ``replicas`` >= 1 (None: prompts alone fill it, or the
    batch does not fit)."""
    engine = model.aggregated
    u = load.rate_rps * prompts.mean_s / replicas
    if u >= 1.0:
        return None
    batch, itl = decode_batch(model, load, replicas, max(model.itl_target_ms / itl_factor, 1e-3), itl_factor,
                             engine)
    if batch > min(engine.decode.max_batch, engine.decode.kv_batch_limit(_kv_context(load))):
        return None
    return itl_factor * (itl / (1.0 - u))


def _aggregated_meets(model: SizingModel, load: Load, itl_factor: float, prompts: PromptTimes,
                      ttft_fits: Callable[[Wait], bool]) -> Callable[[int], bool]:
    """Whether an aggregated pool of c replicas meets the ITL target and, by its wait, the TTFT rule."""
    def meets(c: int) -> bool:
        itl = _aggregated_itl_ms(model, load, c, itl_factor, prompts)
        return (itl is not None and itl <= model.itl_target_ms
                and ttft_fits(wait_at(c, load.rate_rps, prompts.mean_s, prompts.scv, model.percentile)))
    return meets


def size_aggregated(model: SizingModel, load: Load, ttft_factor: float = 1.0, itl_factor: float = 1.0,
                    ceiling: int = 100_000, mix: LengthMix | None = None) -> Sizing:
    """Smallest aggregated pool whose ITL meets its target and whose wait meets the prompts' TTFT rule.

    Searched by doubling up from a lower bound (Little's concurrency over the largest batch meeting the ITL
    target, and the prompts' offered load) and bisection: about 2 log2(c) sizes tried where a scan tried every
    one, each an O(c) Erlang C (a scan of an infeasible load to the 100,000 ceiling took about 20 minutes:
    1.1 s to 3,000, growing as the square).
    """
    if load.rate_rps <= 0:
        t, i = aggregated_latency_ms(model, load, 1, ttft_factor, itl_factor, mix)
        return Sizing(0.0, 0, t, (), i)
    engine, ctx = model.aggregated, _context(load)
    prompts = prompt_times(model, engine, mix, load.isl_tokens, False)
    target_s = model.ttft_target_ms / 1e3 / ttft_factor
    rule = next((r for r in prompts.rules(load.rate_rps, target_s, model.percentile) if not r.last_resort), None)
    b = max(1, min(_largest_batch(model, engine, model.itl_target_ms / itl_factor, load),
                   engine.decode.kv_batch_limit(_kv_context(load))))
    _, n_p = in_flight(model, load, itl_factor * model.itl_ms(engine, 1, ctx))
    start = max(1, math.ceil(n_p / b), math.ceil(load.rate_rps * prompts.mean_s))

    # Bisection finds what a scan finds because meeting the SLA is monotone in c, for one reason: a replica
    # more only divides the same load more ways. The prompt share u = rate x S / c, the batch per replica
    # (Little's concurrency / c) and Erlang C at the same offered load all fall as c grows, and every latency
    # the model predicts rises with them. tests/test_decide_sizing_search.py checks it against a scan.
    c = None if rule is None else smallest_meeting(_aggregated_meets(model, load, itl_factor, prompts, rule.fits),
                                                   start, ceiling)
    if rule is None or c is None:
        need = max(float(start), load.rate_rps * prompts.mean_s / INFEASIBLE_UTILISATION)
        return Sizing(need, math.ceil(need), math.inf, (Reason.SLA_INFEASIBLE,), math.inf)
    t, i = aggregated_latency_ms(model, load, c, ttft_factor, itl_factor, mix)
    return Sizing(float(c), c, t, rule.reasons, i, prompts.unservable_share(target_s))
