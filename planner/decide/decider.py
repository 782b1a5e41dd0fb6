"""decide(policy, profile, observation, forecast, state, now_s) -> (Decision, PlannerState).

Pure: no I/O, no clock. The same function runs in the controller, the simulator and backtests.

The decision, in order (../shared/DESIGN.md):
  0. Data check. NoData, or an observation older than ``metrics.stale_after_intervals`` intervals: hold
     every pool (never scale down on missing data). A pool missing from the observation may scale up but
     not down.
  1. Demand at the horizon ``startup_s + interval_s``: the rate forecast at the policy's quantile (never
     negative), mean ISL and OSL. A forecast that failed falls back to the observed window (reason
     forecast_fallback); measured zero traffic with a zero forecast sizes the pools to their floors.
  2. Prefill: the smallest pool whose TTFT percentile (M/G/c wait + prefill compute + KV transfer over
     ``kv_link`` + first decode step) meets ``sla.ttft_ms``.
  3. Decode: the largest batch whose ITL at the forecast context meets ``sla.itl_ms`` and whose KV fits;
     replicas from Little's concurrency (rate x OSL x ITL) plus its Poisson spread at the percentile.
  4. Calibration: observed vs predicted TTFT/ITL at the observed load and size updates a bounded factor
     (both directions) that multiplies the predictions in 2 and 3 and decays with ``half_life_s``.
  5. Behaviour per pool (tolerance, stabilisation windows, rate policies, floors, ceilings), then the GPU
     budget split by SLA pressure.
  6. Every clamp records a Reason; the Decision carries replicas, reasons and the predicted TTFT/ITL at
     the chosen sizes.
Aggregated mode sizes its single pool against both targets in 2-3.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from planner.config import Policy
from planner.decide import calibration as cal
from planner.decide.behavior import behave, commit
from planner.decide.budget import fit_budget
from planner.decide.capacity import (
    Load,
    Models,
    Sizing,
    aggregated_latency_ms,
    decode_itl_ms,
    prefill_ttft_ms,
    prefill_ttft_table_ms,
    size_aggregated,
    size_decode,
    size_prefill,
)
from planner.decide.state import PlannerState, PoolMemory
from planner.profile import Profile
from planner.types import (
    Decision,
    Forecast,
    LoadForecast,
    NoData,
    Observation,
    PoolDecision,
    PoolObservation,
    Reason,
)

MAX_QUANTILE_RATIO = 2.0
_MODELS: dict[tuple[int, int], tuple[Policy, Profile, Models]] = {}


def models_for(policy: Policy, profile: Profile) -> Models:
    """Engine models for a (policy, profile) pair, built once: decide() runs every tick and in benchmarks."""
    key = (id(policy), id(profile))
    hit = _MODELS.get(key)
    if hit is not None and hit[0] is policy and hit[1] is profile:
        return hit[2]
    models = Models.build(policy, profile)
    if len(_MODELS) > 32:
        _MODELS.clear()
    _MODELS[key] = (policy, profile, models)
    return models


@dataclass(frozen=True)
class Demand:
    load: Load
    reasons: tuple[Reason, ...]
    zero: bool  # zero traffic measured as zero and forecast as zero
    usable: bool  # False: nothing to size from (hold)
    prefill_load: Load | None = None  # the load each pool is sized for (None: ``load``)
    decode_load: Load | None = None

    def for_pool(self, name: str) -> Load:
        pick = {"prefill": self.prefill_load, "decode": self.decode_load}.get(name)
        return pick if pick is not None else self.load


def _work_rate(work: Forecast | None, q: float, length: float, rate: float) -> float:
    """The arrival rate that carries the work forecast at quantile ``q`` at the mean length (never below the
    rate quantile: the work's band only adds the share of a surge that comes from longer requests)."""
    if work is None or not work.ok or length <= 0:
        return rate
    value = _finite(work.at(q))
    mean = _finite(work.mean)
    if value is None or mean is None or value <= 0:
        return rate
    value = min(value, MAX_QUANTILE_RATIO * mean) if mean > 0 else value
    return max(rate, value / length)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _arrivals(policy: Policy, obs: Observation) -> PoolObservation | None:
    """The pool whose started requests are the arrivals: prefill (every request starts there) or aggregated."""
    for name in ("aggregated",) if policy.mode == "aggregated" else ("prefill", "decode"):
        if name in obs.pools:
            return obs.pools[name]
    return None


def _mean_from(obs: Observation, attr: str, prefer: tuple[str, ...]) -> float | None:
    for name in prefer:
        if name in obs.pools:
            v = _finite(getattr(obs.pools[name], attr))
            if v is not None and v > 0:
                return v
    return None


def _fallback_lengths(profile: Profile) -> tuple[float, float]:
    if profile.selection is not None:
        return float(profile.selection.workload.isl), float(profile.selection.workload.osl)
    return 1024.0, 256.0


def demand(policy: Policy, profile: Profile, obs: Observation, forecast: LoadForecast | None) -> Demand:
    reasons: list[Reason] = []
    arrivals = _arrivals(policy, obs)
    q = policy.forecast.quantile
    rate = _finite(forecast.rate_rps.at(q)) if forecast is not None and forecast.rate_rps.ok else None
    if rate is None:
        if arrivals is None:
            return Demand(Load(0, 0, 0), (Reason.NO_DATA_HOLD,), False, False)
        rate = arrivals.rate_rps
        reasons.append(Reason.FORECAST_FALLBACK)
    rate = max(0.0, rate)
    if forecast is not None and forecast.rate_rps.ok and rate > 0:
        # A quantile far above the mean comes from one past surprise (a spike from a low base gives a
        # relative error of 30x); sizing for it would buy 30x the GPUs. Headroom is capped at 2x the mean.
        mean = _finite(forecast.rate_rps.mean)
        if mean is not None and mean > 0 and rate > MAX_QUANTILE_RATIO * mean:
            rate = MAX_QUANTILE_RATIO * mean
    lengths = []
    default_isl, default_osl = _fallback_lengths(profile)
    for series, attr, prefer, default in (
        (forecast.isl_tokens if forecast else None, "isl_mean", ("prefill", "aggregated", "decode"), default_isl),
        (forecast.osl_tokens if forecast else None, "osl_mean", ("decode", "aggregated", "prefill"), default_osl),
    ):
        # Lengths at their mean: the rate quantile already carries the headroom; stacking a length quantile on
        # it sized the Azure conv prefill pool 35 % above the oracle's need in steady state.
        use_q = None
        value = _finite(series.at(use_q)) if series is not None and series.ok else None
        if value is not None and series is not None and use_q is not None:
            mean_len = _finite(series.mean)
            if mean_len is not None and mean_len > 0:
                value = min(value, MAX_QUANTILE_RATIO * mean_len)
        if value is None or value <= 0:
            value = _mean_from(obs, attr, prefer)
            if rate > 0 and Reason.FORECAST_FALLBACK not in reasons:
                reasons.append(Reason.FORECAST_FALLBACK)
        lengths.append(value if value is not None else default)
    measured_zero = arrivals is not None and arrivals.requests == 0 and arrivals.rate_rps == 0
    zero = rate == 0 and measured_zero
    if rate == 0 and not measured_zero and arrivals is None:
        return Demand(Load(0, 0, 0), (Reason.NO_DATA_HOLD,), False, False)
    load = Load(rate, lengths[0], lengths[1])
    if forecast is None or not forecast.rate_rps.ok or rate == 0:
        return Demand(load, tuple(reasons), zero, True)
    p_rate = _work_rate(forecast.prefill_tokens_per_s, q, lengths[0], rate)
    d_rate = _work_rate(forecast.decode_tokens_per_s, q, lengths[1], rate)
    return Demand(load, tuple(reasons), zero, True, replace(load, rate_rps=p_rate), replace(load, rate_rps=d_rate))


# ------------------------------------------------------------------------------------------ calibration
def _calibrate(policy: Policy, models: Models, obs: Observation, state: PlannerState,
               now_s: float) -> PlannerState:
    """Learn from the window just observed: its TTFT/ITL at its own load and size vs the model's prediction."""
    cfg = policy.calibration
    if not cfg.enabled:
        return state
    new = dict(state.calibration)
    p_name = "aggregated" if policy.mode == "aggregated" else "prefill"
    d_name = "aggregated" if policy.mode == "aggregated" else "decode"
    po, do = obs.pools.get(p_name), obs.pools.get(d_name)
    isl = _mean_from(obs, "isl_mean", ("prefill", "aggregated", "decode"))
    osl = _mean_from(obs, "osl_mean", ("decode", "aggregated", "prefill"))
    if po is not None and isl is not None and po.requests >= cal.MIN_REQUESTS and (po.ready_replicas or 0) > 0:
        ready = int(po.ready_replicas or 0)
        # A backlog left by an earlier overload is not a model error: learn only from steady windows.
        if po.queue <= 0.5 * ready:
            load = Load(po.rate_rps, isl, osl or 1.0)
            if policy.mode == "aggregated":
                predicted = aggregated_latency_ms(models, load, ready)[0]
            else:
                predicted = prefill_ttft_ms(models, load, ready)
            new["ttft"] = cal.update(state.factor("ttft"), _finite(po.ttft_ms_p95), predicted, now_s, cfg)
    if do is not None and (do.ready_replicas or 0) > 0 and do.running > 0 and isl is not None and osl is not None:
        ready = int(do.ready_replicas or 0)
        batch = max(1.0, do.running / ready)
        ctx = isl + osl / 2.0
        engine = models.aggregated if policy.mode == "aggregated" else models.decode
        # The ITL percentile covers the whole window while ``running`` is a gauge read at its end: learn only
        # when the gauge agrees (within 30 %) with the window's mean batch by Little (rate x OSL x ITL).
        little = do.rate_rps * osl * (_finite(do.itl_ms_mean) or 0.0) / 1e3 / ready
        steady = little > 0 and abs(batch - little) <= 0.3 * max(batch, little)
        if steady and (do.requests >= cal.MIN_REQUESTS or do.running >= cal.MIN_REQUESTS):
            predicted = engine.decode.itl_ms(batch, ctx).value
            if policy.mode == "aggregated":
                predicted = aggregated_latency_ms(models, Load(do.rate_rps, isl, osl), ready)[1]
            new["itl"] = cal.update(state.factor("itl"), _finite(do.itl_ms_p95), predicted, now_s, cfg)
    return replace(state, calibration=new)


def _factor_reason(factor: float) -> tuple[Reason, ...]:
    if factor > 1.0 + 1e-3:
        return (Reason.CALIBRATED_UP,)
    if factor < 1.0 - 1e-3:
        return (Reason.CALIBRATED_DOWN,)
    return ()


# --------------------------------------------------------------------------------------------- helpers
def _current(name: str, policy: Policy, memory: PoolMemory, obs: Observation | None) -> int:
    """The replicas the pool is at: our last target, unless someone scaled it up behind our back.

    Ready replicas below our target are replicas still starting, so they do not lower ``current``; ready
    replicas above it can only come from an external change, which we adopt so that any way back down goes
    through the scale-down behaviour instead of a sudden drop.
    """
    ready = None
    if obs is not None and name in obs.pools:
        ready = obs.pools[name].ready_replicas
    if memory.target is None:
        return int(ready) if ready is not None else policy.pool(name).min_replicas
    if ready is not None and ready > memory.target:
        return int(ready)
    return memory.target


def _gpus(models: Models, name: str) -> int:
    return {"prefill": models.prefill_gpus, "decode": models.decode_gpus}.get(name, models.aggregated_gpus)


def _dedupe(reasons: list[Reason]) -> tuple[Reason, ...]:
    return tuple(dict.fromkeys(reasons))


def _hold(policy: Policy, models: Models, state: PlannerState, now_s: float, obs: Observation | None,
          why: str) -> tuple[Decision, PlannerState]:
    pools = {}
    for name in policy.pool_names():
        memory = state.pool(name)
        ready = obs.pools[name].ready_replicas if obs is not None and name in obs.pools else None
        if memory.target is None and ready is None:
            # Nothing known about this pool's size (first tick, no data): leave it out of the Decision so
            # the actuator leaves it alone; any number here would be a guess, and a low one a scale-down.
            continue
        current = _current(name, policy, memory, obs)
        replicas = min(max(current, policy.pool(name).min_replicas), policy.pool(name).max_replicas)
        reasons = [Reason.NO_DATA_HOLD]
        if replicas != current:
            reasons.append(Reason.FLOOR if replicas > current else Reason.CEILING)
        pools[name] = PoolDecision(replicas, _gpus(models, name), float(current), tuple(reasons))
        state = state.with_pool(name, commit(memory, current, replicas, now_s, policy.behavior))
    decision = Decision(now_s, pools, (Reason.NO_DATA_HOLD,), detail={"hold": why})  # may omit unknown pools
    return decision, replace(state, at_s=now_s)


# ---------------------------------------------------------------------------------------------- decide
def decide(policy: Policy, profile: Profile, observation: Observation | NoData, forecast: LoadForecast | None,
           state: PlannerState | None, now_s: float) -> tuple[Decision, PlannerState]:
    state = state or PlannerState()
    models = models_for(policy, profile)

    # 0. Data check.
    if isinstance(observation, NoData):
        return _hold(policy, models, state, now_s, None, f"no data: {observation.reason.value}")
    stale_s = policy.metrics.stale_after_intervals * policy.interval_s
    if now_s - observation.at_s > stale_s:
        return _hold(policy, models, state, now_s, observation,
                     f"stale: observation from {now_s - observation.at_s:.0f} s ago (> {stale_s:.0f} s)")
    dem = demand(policy, profile, observation, forecast)
    if not dem.usable:
        return _hold(policy, models, state, now_s, observation, "no arrivals signal and no forecast")

    # 4 (learn first, apply in 2-3). Calibration from the window just observed.
    state = _calibrate(policy, models, observation, state, now_s)
    f_ttft = cal.current(state.factor("ttft"), now_s, policy.calibration)
    f_itl = cal.current(state.factor("itl"), now_s, policy.calibration)

    # 1-3. Demand and SLA sizing, plus any backlog the pools hold now (it must drain within the horizon).
    load = dem.load
    horizon_s = policy.startup_s + policy.interval_s
    p_load, d_load = dem.for_pool("prefill"), dem.for_pool("decode")
    if policy.mode == "disaggregated" and not dem.zero:
        pq = observation.pools["prefill"].queue if "prefill" in observation.pools else 0.0
        dq = observation.pools["decode"].queue if "decode" in observation.pools else 0.0
        if pq > 0:
            p_load = replace(p_load, rate_rps=p_load.rate_rps + pq / horizon_s)
        if dq > 0:
            # Sequences waiting for a decode slot drain like the prefill backlog: as extra arrivals over the
            # horizon (turning them into concurrency instead sized the Azure code pool, OSL 28, for a burst
            # that clears in a second, with replicas that take two minutes to start).
            d_load = replace(d_load, rate_rps=d_load.rate_rps + dq / horizon_s)
    sized: dict[str, Sizing] = {}
    pressure_of = {}
    if policy.mode == "aggregated":
        sized["aggregated"] = size_aggregated(models, load, f_ttft, f_itl)

        def agg_pressure(c: int) -> float:
            ttft, itl = aggregated_latency_ms(models, load, c, f_ttft, f_itl)
            return max(ttft / models.ttft_target_ms, itl / models.itl_target_ms)

        pressure_of["aggregated"] = agg_pressure
    else:
        sized["prefill"] = size_prefill(models, p_load, f_ttft)
        sized["decode"] = size_decode(models, d_load, f_itl)
        table: list[float] = []

        def prefill_pressure(c: int) -> float:
            if not table:  # one O(c) pass, only when the budget binds
                table.extend(prefill_ttft_table_ms(models, p_load, max(1, asked["prefill"]), f_ttft))
            return table[min(c, len(table) - 1)] / models.ttft_target_ms

        pressure_of["prefill"] = prefill_pressure
        pressure_of["decode"] = lambda c: decode_itl_ms(models, d_load, c, f_itl) / models.itl_target_ms
    base = [Reason.ZERO_TRAFFIC] if dem.zero else [Reason.SLA_CAPACITY]

    # 5. Behaviour per pool.
    asked: dict[str, int] = {}
    currents: dict[str, int] = {}
    reasons: dict[str, list[Reason]] = {}
    memories: dict[str, PoolMemory] = {}
    for name in policy.pool_names():
        spec = policy.pool(name)
        memory = state.pool(name)
        currents[name] = _current(name, policy, memory, observation)
        desired = 0 if dem.zero else sized[name].replicas
        factor_reasons = _factor_reason(f_itl if name == "decode" else f_ttft) if not dem.zero else ()
        if name == "aggregated" and not dem.zero:
            factor_reasons = _factor_reason(f_ttft) + _factor_reason(f_itl)
        # A missing pool, or a forecast that fell back to the last window (no history yet), may scale up but
        # not down: both are degraded signals, and a scale-down on them is the costly mistake.
        allow_down = name in observation.pools and Reason.FORECAST_FALLBACK not in dem.reasons
        b = behave(desired, currents[name], memory, now_s, policy.behavior, spec, allow_down)
        asked[name] = b.replicas
        memories[name] = b.memory
        reasons[name] = [*base, *dem.reasons, *factor_reasons, *sized[name].reasons, *b.reasons]

    floors = {n: policy.pool(n).min_replicas for n in asked}
    gpus = {n: _gpus(models, n) for n in asked}
    seen: dict[tuple[str, int], float] = {}

    def pressure(n: str, c: int) -> float:
        if (n, c) not in seen:
            seen[(n, c)] = pressure_of[n](c)
        return seen[(n, c)]

    final, short = fit_budget(asked, gpus, floors, policy.budget.max_gpus, pressure)
    pools: dict[str, PoolDecision] = {}
    for name in policy.pool_names():
        if name in short:
            reasons[name].append(Reason.BUDGET)
        replicas = final[name]
        state = state.with_pool(name, commit(memories[name], currents[name], replicas, now_s, policy.behavior))
        if name == "aggregated":
            ttft, itl = aggregated_latency_ms(models, load, replicas, f_ttft, f_itl)
        elif name == "prefill":
            ttft, itl = prefill_ttft_ms(models, p_load, replicas, f_ttft), None
        else:
            ttft, itl = None, decode_itl_ms(models, d_load, replicas, f_itl)
        pools[name] = PoolDecision(replicas, gpus[name], sized[name].desired, _dedupe(reasons[name]),
                                   _finite(ttft), _finite(itl))
    all_reasons = _dedupe([r for name in policy.pool_names() for r in pools[name].reasons])
    ttft_pool = "aggregated" if policy.mode == "aggregated" else "prefill"
    itl_pool = "aggregated" if policy.mode == "aggregated" else "decode"
    detail: Mapping[str, float | str] = {
        "rate_rps": load.rate_rps, "isl_tokens": load.isl_tokens, "osl_tokens": load.osl_tokens,
        "prefill_rate_rps": p_load.rate_rps, "decode_rate_rps": d_load.rate_rps,
        "ttft_factor": f_ttft, "itl_factor": f_itl,
    }
    decision = Decision(now_s, pools, all_reasons, pools[ttft_pool].predicted_ttft_ms,
                        pools[itl_pool].predicted_itl_ms, detail)
    return decision, replace(state, at_s=now_s)
