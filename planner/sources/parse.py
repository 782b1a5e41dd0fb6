"""Strict parsing of one read's query result into an Observation, or NoData with the reason.

Shape (the vector result type), cardinality (one sample per pool and signal) and finiteness are checked
here; a signal that is absent or NaN is never read as zero. Zero traffic that *is* measured (counters
present, no increase) is zero: rate 0, latencies None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.sources.attainment import attainment
from planner.sources.dialects import Dialect
from planner.sources.promql import BOUNDS_SUFFIX, COUNTS_SUFFIX, POOL_LABEL, Q_LABEL, QUANTILES, SLA_LABEL
from planner.sources.resolution import Resolution, bracket
from planner.types import NoData, NoDataReason, Observation, PoolObservation


class BadResponse(ValueError):
    pass


@dataclass(frozen=True)
class _Problem:
    reason: NoDataReason
    detail: str


@dataclass
class PoolSamples:
    values: dict[str, float] = field(default_factory=dict)  # signal -> its one sample
    bounds: dict[str, list[float]] = field(default_factory=dict)  # ttft/itl -> the histogram's bucket bounds (s)
    # isl/ttft/itl -> the window's (le, cumulative count) samples
    counts: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def samples_by_pool(result: Any, pools: Sequence[str]) -> dict[str, PoolSamples]:
    """Validate a /api/v1/query ``data.result`` (instant vector) and index it by pool and signal."""
    if not isinstance(result, list):
        raise BadResponse(f"result is {type(result).__name__}, expected an instant vector (list)")
    out: dict[str, PoolSamples] = {p: PoolSamples() for p in pools}
    for item in result:
        # prometheus-api-client hides resultType: a scalar/string arrives as [ts, "v"] and a matrix as
        # {"metric", "values"}; only {"metric", "value": [ts, "v"]} is an instant-vector sample.
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise BadResponse(f"result item {item!r:.80} is not a vector sample")
        value = item.get("value")
        if not (isinstance(value, list | tuple) and len(value) == 2 and isinstance(value[1], str)):
            raise BadResponse(f"result item has no [time, \"value\"] pair (got {value!r:.60})")
        pool, q = item["metric"].get(POOL_LABEL), item["metric"].get(Q_LABEL)
        if pool not in out or not q:
            raise BadResponse(f"unexpected series {item['metric']!r:.120}")
        if q.endswith(BOUNDS_SUFFIX):  # one sample per bucket bound, the bound in its le label
            out[pool].bounds.setdefault(q.removesuffix(BOUNDS_SUFFIX), []).append(_bound(item["metric"], pool, q))
            continue
        if q.endswith(COUNTS_SUFFIX):  # one sample per bucket bound, its value the bucket's cumulative count
            out[pool].counts.setdefault(q.removesuffix(COUNTS_SUFFIX), []).append(
                (_bound(item["metric"], pool, q), _number(value[1], pool, q)))
            continue
        if q in out[pool].values:
            raise BadResponse(f"pool {pool!r} signal {q!r}: more than one sample (selector too broad?)")
        try:
            out[pool].values[q] = float(value[1])
        except ValueError:
            raise BadResponse(f"pool {pool!r} signal {q!r}: value {value[1]!r} is not a number") from None
    return out


def _number(text: str, pool: str, q: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BadResponse(f"pool {pool!r} signal {q!r}: value {text!r} is not a number") from None


def per_bucket(cumulative: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Cumulative histogram samples (le, count) as (upper bound, requests in that bucket); NaN or negative
    steps (a counter reset inside the window) make the distribution unknown: ()."""
    out, below = [], 0.0
    for le, count in sorted(cumulative):
        n = count - below
        if not math.isfinite(count) or n < -1e-9:
            return ()
        if n > 0:
            out.append((le, n))
        below = max(below, count)
    return tuple(out)


def _bound(metric: Mapping[str, str], pool: str, q: str) -> float:
    try:
        return float(metric["le"])  # "+Inf" included
    except (KeyError, ValueError):
        raise BadResponse(f"pool {pool!r} signal {q!r}: le label {metric.get('le')!r} is not a bound") from None


def _need(vals: Mapping[str, float], pool: str, q: str, what: str) -> float | _Problem:
    if q not in vals:
        return _Problem(NoDataReason.EMPTY, f"pool {pool!r}: {what} has no series")
    v = vals[q]
    if not math.isfinite(v):
        return _Problem(NoDataReason.NAN, f"pool {pool!r}: {what} is {v}")
    return v


def _pool(d: Dialect, pool: str, got: PoolSamples, window_s: float, now_s: float, stale_after_s: float,
          targets_ms: Mapping[str, float]) -> PoolObservation | _Problem | None:
    """None: the pool has no series at all (empty or missing, decided by the caller)."""
    vals = got.values
    if "newest" not in vals:
        if vals.get("seen", 0) > 0:
            return _Problem(NoDataReason.STALE, f"pool {pool!r}: {d.presence_gauge} went stale "
                                                 f"(seen in the lookback, no current sample)")
        return None
    newest = vals["newest"]
    if not math.isfinite(newest) or now_s - newest > stale_after_s:
        return _Problem(NoDataReason.STALE, f"pool {pool!r}: newest {d.presence_gauge} sample is "
                                             f"{now_s - newest:.1f}s old (> {stale_after_s:g}s)")
    need = _required(d, pool, vals)
    if isinstance(need, _Problem):
        return need
    started = _started(d, pool, vals, need, window_s)
    lat = _latencies(d, pool, vals, need)
    kv = _kv(d, pool, vals)
    for problem in (started, lat, kv):
        if isinstance(problem, _Problem):
            return problem
    assert isinstance(started, float) and isinstance(lat, dict) and not isinstance(kv, _Problem)
    ttft_counted, ttft_met = _attained("ttft", got.counts, need, targets_ms)
    itl_counted, itl_met = _attained("itl", got.counts, need, targets_ms)
    return PoolObservation(
        requests=started,
        rate_rps=started / window_s,
        isl_mean=need["isl_num"] / need["isl_den"] if need["isl_den"] > 0 else None,
        osl_mean=need["osl_num"] / need["osl_den"] if need["osl_den"] > 0 else None,
        ttft_ms_p50=lat["ttft_p50"], ttft_ms_p95=lat["ttft_p95"], ttft_ms_mean=lat["ttft_mean"],
        itl_ms_p50=lat["itl_p50"], itl_ms_p95=lat["itl_p95"], itl_ms_mean=lat["itl_mean"],
        ttft_ms_at_sla=lat[f"ttft_{SLA_LABEL}"], itl_ms_at_sla=lat[f"itl_{SLA_LABEL}"],
        queue=max(0.0, need["queue"]), running=max(0.0, need["running"]), kv_usage=kv,
        ready_replicas=int(vals.get("fresh", 0.0)),
        isl_buckets=per_bucket(got.counts.get("isl", ())),
        **_resolutions(got.bounds, targets_ms),
        ttft_counted=ttft_counted, ttft_met=ttft_met, itl_counted=itl_counted, itl_met=itl_met,
    )


def _required(d: Dialect, pool: str, vals: Mapping[str, float]) -> dict[str, float] | _Problem:
    """The signals every read must have, finite."""
    names = {"completed": d.completed_counter, "running": d.running_gauge, "queue": d.queue_gauge,
             "isl_num": d.isl.numerator, "isl_den": d.isl.denominator, "osl_num": d.osl.numerator,
             "osl_den": d.osl.denominator, "ttft_sum": f"{d.ttft_histogram}_sum",
             "ttft_count": f"{d.ttft_histogram}_count", "itl_sum": f"{d.itl_histogram}_sum",
             "itl_count": f"{d.itl_histogram}_count"}
    names.update({f"in_now_{i}": g for i, g in enumerate(d.in_system_gauges)})
    got: dict[str, float] = {}
    for q, what in names.items():
        v = _need(vals, pool, q, what)
        if isinstance(v, _Problem):
            return v
        got[q] = v
    return got


def _started(d: Dialect, pool: str, vals: Mapping[str, float], got: Mapping[str, float],
             window_s: float) -> float | _Problem:
    """Requests started in the window: completed + in flight now - in flight a window ago."""
    before = 0.0  # the pool did not exist W ago: nothing was in flight then
    for i, gauge in enumerate(d.in_system_gauges):
        v = vals.get(f"in_before_{i}", 0.0)
        if not math.isfinite(v):
            return _Problem(NoDataReason.NAN, f"pool {pool!r}: {gauge} offset {window_s:g}s is {v}")
        before += v
    in_now = sum(got[f"in_now_{i}"] for i in range(len(d.in_system_gauges)))
    return float(max(0.0, got["completed"] + in_now - before))


def _latencies(d: Dialect, pool: str, vals: Mapping[str, float],
               got: Mapping[str, float]) -> dict[str, float | None] | _Problem:
    lat: dict[str, float | None] = {}
    for name, hist in (("ttft", d.ttft_histogram), ("itl", d.itl_histogram)):
        count = got[f"{name}_count"]
        lat[f"{name}_mean"] = got[f"{name}_sum"] / count * 1e3 if count > 0 else None
        for label in (*(label for label, _ in QUANTILES), SLA_LABEL):
            lat[f"{name}_{label}"] = None
            if count > 0:  # with no observation histogram_quantile is NaN by definition: nothing to measure
                v = _need(vals, pool, f"{name}_{label}", f"histogram_quantile of {hist}_bucket")
                if isinstance(v, _Problem):
                    return v
                lat[f"{name}_{label}"] = v * 1e3
    return lat


def _kv(d: Dialect, pool: str, vals: Mapping[str, float]) -> float | None | _Problem:
    if d.kv_usage_gauge is None or "kv" not in vals:
        return None
    v = _need(vals, pool, "kv", d.kv_usage_gauge)
    return v if isinstance(v, _Problem) else min(1.0, max(0.0, v * d.kv_usage_scale))


def _resolutions(bounds: Mapping[str, list[float]], targets_ms: Mapping[str, float]) -> dict[str, Any]:
    """PoolObservation's ``{signal}_p95_bracket_ms / _resolution / _resolved`` for each signal with a
    target and a bucket layout (the others stay None: not assessed)."""
    out: dict[str, Any] = {}
    for signal in ("ttft", "itl"):
        target = targets_ms.get(signal)
        res: Resolution | None = bracket(bounds.get(signal, ()), target) if target is not None else None
        if res is not None:
            out.update({f"{signal}_p95_bracket_ms": (res.lower_ms, res.upper_ms),
                        f"{signal}_p95_resolution": res.ratio, f"{signal}_p95_resolved": res.resolved})
    return out


def _attained(signal: str, counts: Mapping[str, Sequence[tuple[float, float]]], got: Mapping[str, float],
              targets_ms: Mapping[str, float]) -> tuple[float | None, float | None]:
    """PoolObservation's ``{signal}_counted, {signal}_met``: the window's ``_count`` increase and how many of
    those observations were at or under the SLA target, interpolated between the bucket bounds around it
    (attainment.py states the precision; ``*_p95_resolution`` is that bucket's width over the target). Every
    pool with a target and a histogram gets them; the error budget reads TTFT's on the pool that sets TTFT
    and ITL's on the pool that sets ITL. (None, None) without a target or without usable buckets.

    What ITL counts: vLLM's ``inter_token_latency_seconds`` observes every token gap, not each request's mean
    ITL, so ``itl_counted`` / ``itl_met`` are token gaps and token gaps within the target - a per-token
    proxy for the per-request ITL SLA, weighted by output length: a long request counts once per gap, and
    one slow gap in a request that meets its SLA on average counts as a miss. SGLang's and Dynamo's ITL
    histograms are observed as tokens stream too (per gap or per chunk; not checked per build). Only
    TRT-LLM's stand-in (TPOT, Dialect.itl_note) observes once per request: there they are requests.
    """
    measured = attainment(got.get(f"{signal}_count"), counts.get(signal, ()), targets_ms.get(signal))
    return measured if measured is not None else (None, None)


def parse_read(result: Any, d: Dialect, pools: Sequence[str], window_s: float, now_s: float,
               stale_after_s: float, targets_ms: Mapping[str, float] | None = None) -> Observation | NoData:
    """``targets_ms``: the SLA targets ({"ttft": ms, "itl": ms}) whose bucket resolution and attainment
    (``*_counted``, ``*_met``) each pool reports."""
    try:
        by_pool = samples_by_pool(result, pools)
    except BadResponse as exc:
        return NoData(NoDataReason.BAD_RESPONSE, str(exc), now_s)
    observed: dict[str, PoolObservation] = {}
    missing: list[str] = []
    for pool in pools:
        got = _pool(d, pool, by_pool[pool], window_s, now_s, stale_after_s, targets_ms or {})
        if isinstance(got, _Problem):
            return NoData(got.reason, got.detail, now_s)
        if got is None:
            missing.append(pool)
        else:
            observed[pool] = got
    if missing and not observed:
        return NoData(NoDataReason.EMPTY, f"no {d.presence_gauge} series for pool(s) {', '.join(missing)} "
                                          f"(dialect {d.name}; check the selectors)", now_s)
    if missing:
        return NoData(NoDataReason.MISSING_POOL, f"pool(s) {', '.join(missing)} have no "
                                                 f"{d.presence_gauge} series while "
                                                 f"{', '.join(observed)} do", now_s)
    return Observation(at_s=now_s, window_s=window_s, pools=observed)
