"""Stage 1 of the decision: is there data to act on, and what load must each pool be sized for?

The load is the forecast at the decision horizon (``startup_s + interval_s``): the arrival rate at the
policy's quantile, mean prompt and output lengths, and for each pool the quantile of its own work (prompt
tokens/s for prefill, output tokens/s for decode) plus any backlog it holds now, which must drain within
the horizon. No data, stale data or nothing to size from is a Hold: never a guess, never a scale-down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.config import Policy
from planner.decide.capacity import Load
from planner.decide.error_budget import headroom_quantile, sizing_percentile
from planner.decide.spec import DeciderSpec
from planner.types import (
    Forecast,
    LengthMix,
    LoadForecast,
    Mode,
    NoData,
    Observation,
    Pool,
    PoolObservation,
    Reason,
)

# A quantile far above the mean comes from one past surprise (a spike from a low base gives a relative
# error of 30x); sizing for it would buy 30x the GPUs. Headroom is capped at 2x the mean.
MAX_QUANTILE_RATIO = 2.0
ISL_SOURCES = (Pool.PREFILL, Pool.AGGREGATED, Pool.DECODE)  # where a mean prompt length is read, in order
OSL_SOURCES = (Pool.DECODE, Pool.AGGREGATED, Pool.PREFILL)


@dataclass(frozen=True)
class Hold:
    """Nothing trustworthy to size from: every pool keeps its size (reason no_data_hold)."""

    why: str


@dataclass(frozen=True)
class Demand:
    load: Load  # the rate at the quantile with mean lengths (the aggregated pool is sized for this)
    prefill: Load  # the prefill pool's load: its work quantile, plus its backlog
    decode: Load  # the decode pool's load: its work quantile, plus its backlog
    reasons: tuple[Reason, ...]
    zero: bool  # zero traffic measured as zero and forecast as zero
    isl_mix: LengthMix | None = None  # the prompt-length mix's shape (None: exponential around the mean)
    quantile: float | None = None  # the forecast quantile sized at (the error budget's headroom)
    # The decode pool's sequences running now and its ready replicas (what size.py holds against the batch the
    # ITL target allows: the excess is a backlog); (0, 0): not observed.
    decode_held: tuple[float, int] = (0.0, 0)
    percentile: float | None = None  # the latency percentile to size at (None: the SLA's)
    # The decode pool's load at forecast.quantile while the pools lean: its KV must hold that load's batch
    # (size.py, the KV guard; config.py, sla.lean_decode, says why). None: no guard (nothing leans, or lean_decode).
    decode_kv: Load | None = None

    def for_pool(self, pool: Pool) -> Load:
        return {Pool.PREFILL: self.prefill, Pool.DECODE: self.decode}.get(pool, self.load)


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def mean_length(obs: Observation, attr: str, prefer: tuple[Pool, ...]) -> float | None:
    """The first finite, positive ``attr`` (``isl_mean`` / ``osl_mean``) among the pools in ``prefer``."""
    for name in prefer:
        if name in obs.pools:
            v = finite(getattr(obs.pools[name], attr))
            if v is not None and v > 0:
                return v
    return None


def check_data(spec: DeciderSpec, observation: Observation | NoData, now_s: float) -> Observation | Hold:
    """NoData, or an observation older than ``spec.stale_after_s``, holds every pool."""
    if isinstance(observation, NoData):
        return Hold(f"no data: {observation.reason.value}")
    stale_s = spec.stale_after_s
    if now_s - observation.at_s > stale_s:
        return Hold(f"stale: observation from {now_s - observation.at_s:.0f} s ago (> {stale_s:.0f} s)")
    return observation


def _arrivals(spec: DeciderSpec, obs: Observation) -> PoolObservation | None:
    """The pool whose started requests are the arrivals: prefill (every request starts there) or aggregated."""
    order = (Pool.AGGREGATED,) if spec.policy.mode is Mode.AGGREGATED else (Pool.PREFILL, Pool.DECODE)
    return next((obs.pools[p] for p in order if p in obs.pools), None)


def measured_idle(spec: DeciderSpec, obs: Observation) -> bool:
    """No request started over the observed window, and none waits, at an engine or at the router (what scale
    to zero's idle window counts)."""
    arrivals = _arrivals(spec, obs)
    return (obs.waiting == 0 and arrivals is not None and arrivals.requests == 0 and arrivals.rate_rps == 0
            and not any((p.queue or 0) > 0 for p in obs.pools.values()))


def _capped(rate: float, forecast: LoadForecast | None) -> float:
    """``rate`` capped at MAX_QUANTILE_RATIO x the rate forecast's mean."""
    if forecast is None or not forecast.rate_rps.ok or rate <= 0:
        return rate
    mean = finite(forecast.rate_rps.mean)
    return MAX_QUANTILE_RATIO * mean if mean is not None and mean > 0 and rate > MAX_QUANTILE_RATIO * mean else rate


def _mean_forecast(series: Forecast | None) -> float | None:
    # Lengths at their mean: the rate quantile already carries the headroom, and a length quantile stacked on
    # it would count the same surprise twice (a pool sized well above what even a steady load needs).
    value = finite(series.mean) if series is not None and series.ok else None
    return value if value is not None and value > 0 else None


def _work_rate(work: Forecast | None, q: float, length: float, rate: float) -> float:
    """The arrival rate that carries the work forecast at quantile ``q`` at the mean length (never below the
    rate quantile: the work's band only adds the share of a surge that comes from longer requests)."""
    if work is None or not work.ok or length <= 0:
        return rate
    value = finite(work.at(q))
    mean = finite(work.mean)
    if value is None or mean is None or value <= 0:
        return rate
    value = min(value, MAX_QUANTILE_RATIO * mean) if mean > 0 else value
    return max(rate, value / length)


def _with_backlog(load: Load, queue: float, horizon_s: float) -> Load:
    # Requests waiting in a pool drain as extra arrivals over the horizon. Counted as concurrency instead,
    # decode waiters would size the pool for a burst that clears in a second (Azure code's OSL is 28) with
    # replicas that take two minutes to start.
    return replace(load, rate_rps=load.rate_rps + queue / horizon_s) if queue > 0 else load


def demand(spec: DeciderSpec, obs: Observation, forecast: LoadForecast | None) -> Demand | Hold:
    reasons: list[Reason] = []
    arrivals = _arrivals(spec, obs)
    q, headroom = headroom_quantile(spec.policy, forecast.sla_budget if forecast is not None else None,
                                    forecast.rate_cv if forecast is not None else None)
    if headroom is not None:
        reasons.append(headroom)
    rate = finite(forecast.rate_rps.at(q)) if forecast is not None and forecast.rate_rps.ok else None
    if rate is None:
        if arrivals is None:
            return Hold("no arrivals signal and no forecast")
        rate = arrivals.rate_rps
        reasons.append(Reason.FORECAST_FALLBACK)
    rate = _capped(max(0.0, rate), forecast)
    lengths = []
    for series, attr, prefer, default in (
        (forecast.isl_tokens if forecast else None, "isl_mean", ISL_SOURCES, spec.fallback_isl_tokens),
        (forecast.osl_tokens if forecast else None, "osl_mean", OSL_SOURCES, spec.fallback_osl_tokens),
    ):
        value = _mean_forecast(series)
        if value is None:
            value = mean_length(obs, attr, prefer)
            if rate > 0 and Reason.FORECAST_FALLBACK not in reasons:
                reasons.append(Reason.FORECAST_FALLBACK)
        lengths.append(value if value is not None else default)
    measured_zero = arrivals is not None and arrivals.requests == 0 and arrivals.rate_rps == 0
    if rate == 0 and not measured_zero and arrivals is None:
        return Hold("no arrivals signal and no forecast")
    zero = rate == 0 and measured_zero
    load = Load(rate, lengths[0], lengths[1])
    p_load = d_load = load
    q_kv = kv_guard_quantile(spec.policy, q, headroom)
    kv_load = None
    if forecast is not None and forecast.rate_rps.ok and rate > 0:
        p_load = replace(load, rate_rps=_work_rate(forecast.prefill_tokens_per_s, q, lengths[0], rate))
        d_load = replace(load, rate_rps=_work_rate(forecast.decode_tokens_per_s, q, lengths[1], rate))
        if q_kv is not None:
            rate_kv = _capped(max(0.0, finite(forecast.rate_rps.at(q_kv)) or rate), forecast)
            kv_load = replace(load, rate_rps=_work_rate(forecast.decode_tokens_per_s, q_kv, lengths[1], rate_kv))
    if spec.policy.mode is Mode.DISAGGREGATED and not zero:
        p_load = _with_backlog(p_load, _queue(obs, Pool.PREFILL), spec.horizon_s)
        d_load = _with_backlog(d_load, _queue(obs, Pool.DECODE), spec.horizon_s)
        kv_load = None if kv_load is None else _with_backlog(kv_load, _queue(obs, Pool.DECODE), spec.horizon_s)
    pct = sizing_percentile(spec.policy, forecast.sla_budget if forecast is not None else None)
    if pct is not None:
        reasons.append(Reason.BUDGET_TIGHTENED)
    return Demand(load, p_load, d_load, tuple(reasons), zero, _mix(spec, obs, forecast), q, _held(spec, obs), pct,
                  kv_load)


def kv_guard_quantile(policy: Policy, q: float, headroom: Reason | None) -> float | None:
    """The forecast quantile whose load the decode pool's KV must hold while the pools lean: ``forecast.quantile``
    (config.py, ``sla.lean_decode``, says why); None where nothing leans below it or ``sla.lean_decode`` is on."""
    if headroom is Reason.BUDGET_LEAN and not policy.sla.lean_decode and policy.forecast.quantile > q:
        return policy.forecast.quantile
    return None


def observed_load(spec: DeciderSpec, obs: Observation) -> Load | None:
    """The load the observation measured: the arrivals' rate with the window's mean prompt and output lengths
    (None when no rate, or no length, was measured)."""
    arrivals = _arrivals(spec, obs)
    isl, osl = mean_length(obs, "isl_mean", ISL_SOURCES), mean_length(obs, "osl_mean", OSL_SOURCES)
    if arrivals is None or finite(arrivals.rate_rps) is None or isl is None or osl is None:
        return None
    return Load(max(0.0, arrivals.rate_rps), isl, osl)


def _held(spec: DeciderSpec, obs: Observation) -> tuple[float, int]:
    do = obs.pools.get(Pool.DECODE) if spec.policy.mode is Mode.DISAGGREGATED else None
    if do is None or not math.isfinite(do.running):
        return 0.0, 0
    return max(0.0, do.running), int(do.ready_replicas or 0)


def _mix(spec: DeciderSpec, obs: Observation, forecast: LoadForecast | None) -> LengthMix | None:
    """The forecast's prompt-length mix, else the window's own (the pool every request starts in)."""
    if forecast is not None and forecast.isl_mix is not None:
        return forecast.isl_mix
    front = spec.mode.ttft_pool
    return LengthMix.from_buckets(obs.pools[front].isl_buckets) if front in obs.pools else None


def _queue(obs: Observation, pool: Pool) -> float:
    return obs.pools[pool].queue if pool in obs.pools else 0.0
