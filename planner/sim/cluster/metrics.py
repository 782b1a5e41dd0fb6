"""The simulator seen through the controller's interfaces: a MetricSource and an Actuator.

What :meth:`SimMetricSource.read` returns is what a Prometheus query over the last ``window_s`` would show:
- ``requests`` / ``rate_rps``: requests that *entered* the pool in the window (prefill/aggregated: arrivals;
  decode: KV transfers that completed), ``isl_mean`` over those requests;
- ``osl_mean`` over the requests that *finished* in the window, as engines export it (vLLM's
  request_generation_tokens is observed when a request ends): while the load rises, or a pool runs over its
  batch, only short answers have finished and the mean read is a fraction of the real one, as it is live;
- TTFT p50/p95/mean over requests whose first token came in the window; ITL p50/p95/mean over every token
  gap emitted in the window (token-weighted, like the engines' ITL histogram). Both are end-to-end
  (frontend) figures and are reported on every pool;
- gauges at ``now_s``: queue (waiting requests), running, KV usage (decode/aggregated), ready replicas.
- ``completed``: requests that *finished* in the window, their mean ISL, OSL and arrival-to-last-token
  duration (what a frontend's request counter and histograms show; the same on every pool).
Before one full window has passed since the start of the replay there is nothing to rate over: NoData.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping

import numpy as np

from planner.sim.cluster.cluster import Cluster
from planner.types import (
    Applied,
    Completions,
    NoData,
    NoDataReason,
    Observation,
    PoolObservation,
    buckets_1_2_5,
)

# Requests that waited longer than this for their first token are not searched for (bounded read cost).
TTFT_LOOKBACK_S = 1800.0


def _pcts(values: np.ndarray, weights: np.ndarray | None = None,
          sla_percentile: float = 95.0) -> tuple[float, float, float, float] | None:
    """(p50, p95, mean, the value at ``sla_percentile``), weighted by ``weights`` when given."""
    if len(values) == 0:
        return None
    if weights is None:
        p50, p95, at_sla = np.percentile(values, [50, 95, sla_percentile])
        return float(p50), float(p95), float(values.mean()), float(at_sla)
    order = np.argsort(values)
    v = values[order]
    w = np.cumsum(weights[order])
    total = w[-1]
    if total <= 0:
        return None
    i50, i95, i_sla = (min(int(np.searchsorted(w, q * total)), len(v) - 1) for q in (0.5, 0.95, sla_percentile / 100))
    return float(v[i50]), float(v[i95]), float(np.dot(values, weights) / weights.sum()), float(v[i_sla])


# The prompt-length histogram an engine exports (vLLM: 1-2-5 bounds up to its context length, then +inf).
PROMPT_BOUNDS = (*buckets_1_2_5(1_000_000), math.inf)


def prompt_buckets(lengths: np.ndarray) -> tuple[tuple[float, float], ...]:
    """(upper bound, requests) per bucket, non-cumulative, empty buckets left out."""
    if len(lengths) == 0:
        return ()
    idx = np.searchsorted(PROMPT_BOUNDS, lengths, side="left")  # bucket i holds (bound[i-1], bound[i]]
    counts = np.bincount(idx, minlength=len(PROMPT_BOUNDS))
    return tuple((PROMPT_BOUNDS[i], float(n)) for i, n in enumerate(counts) if n)


class SimMetricSource:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def ttfts_ms(self, window_s: float, now_s: float) -> np.ndarray:
        """TTFT (ms) of the requests whose first token came in (now - window, now], as the engines' histograms
        count it: from when an engine received the request. A request the router held while its policy was at
        zero is not in an engine's TTFT until it is dispatched (the wait is in the client's TTFT, which the
        scores count, not in what the controller reads)."""
        log = self.c.log
        lo_t = now_s - window_s
        lo = bisect_left(log.arrival_s, lo_t - TTFT_LOOKBACK_S)
        hi = bisect_right(log.arrival_s, now_s)
        first = np.asarray(log.first_token_s[lo:hi], dtype=np.float64)
        arr = np.asarray(log.dispatched_s[lo:hi], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            mask = (first > lo_t) & (first <= now_s)
        return (first[mask] - arr[mask]) * 1e3

    def token_gaps(self, window_s: float, now_s: float) -> np.ndarray:
        """(time, gap s, tokens) rows of the token gaps that ended in (now - window, now]."""
        log = self.c.log
        a = bisect_right(log.token_gaps, (now_s - window_s, math.inf, 0))
        b = bisect_right(log.token_gaps, (now_s, math.inf, 0))
        return np.asarray(log.token_gaps[a:b], dtype=np.float64).reshape(-1, 3)

    def latency(self, window_s: float, now_s: float) -> tuple[tuple[float, float, float, float] | None,
                                                              tuple[float, float, float, float] | None]:
        """(TTFT p50, p95, mean, at the SLA percentile) and the same for ITL, in ms over the window, or None
        when empty."""
        pct = self.c.config.sla_percentile
        ttft = _pcts(self.ttfts_ms(window_s, now_s), None, pct)
        seg = self.token_gaps(window_s, now_s)
        itl = _pcts(seg[:, 1] * 1e3, seg[:, 2], pct) if len(seg) else None
        return ttft, itl

    def within_targets(self, window_s: float, now_s: float) -> dict[str, float | None]:
        """The window's requests whose first token came in it and how many met the TTFT target; its token gaps
        and how many were within the ITL target (per token, as an engine's ITL histogram counts them)."""
        cfg = self.c.config
        out: dict[str, float | None] = {"ttft_counted": None, "ttft_met": None, "itl_counted": None, "itl_met": None}
        if cfg.sla_ttft_ms is not None:
            ttft_ms = self.ttfts_ms(window_s, now_s)
            out["ttft_counted"] = float(len(ttft_ms))
            out["ttft_met"] = float(np.count_nonzero(ttft_ms <= cfg.sla_ttft_ms))
        if cfg.sla_itl_ms is not None:
            seg = self.token_gaps(window_s, now_s)
            out["itl_counted"] = float(seg[:, 2].sum())
            out["itl_met"] = float(seg[seg[:, 1] * 1e3 <= cfg.sla_itl_ms, 2].sum())
        return out

    def completions(self, window_s: float, now_s: float) -> Completions:
        """Requests whose last token came in (now - window, now]; those that waited longer than the look-back
        are not searched for (bounded read cost, as for TTFT)."""
        log = self.c.log
        lo = bisect_left(log.arrival_s, now_s - window_s - TTFT_LOOKBACK_S)
        hi = bisect_right(log.arrival_s, now_s)
        fin = np.asarray(log.finish_s[lo:hi], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            idx = np.nonzero((fin > now_s - window_s) & (fin <= now_s))[0]
        if len(idx) == 0:
            return Completions(requests=0.0)
        arr = np.asarray(log.arrival_s[lo:hi], dtype=np.float64)[idx]
        return Completions(requests=float(len(idx)), isl_mean=float(np.mean([log.isl[lo + i] for i in idx])),
                           osl_mean=float(np.mean([log.osl[lo + i] for i in idx])),
                           duration_s_mean=float(np.mean(fin[idx] - arr)))

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        c, log = self.c, self.c.log
        if now_s < window_s - 1e-9:
            return NoData(NoDataReason.EMPTY, f"less than one {window_s:g} s window since the replay began",
                          now_s)
        ttft, itl = self.latency(window_s, now_s)
        done = self.completions(window_s, now_s)
        within = self.within_targets(window_s, now_s)
        pools: dict[str, PoolObservation] = {}
        for pool in c.pools:
            if pool == "decode":
                a = bisect_right(log.decode_arrival_s, now_s - window_s)
                b = bisect_right(log.decode_arrival_s, now_s)
                reqs: list[int] | range = log.decode_arrival_request[a:b]
            else:  # the front pool's arrivals are the trace's (request id = arrival order)
                reqs = range(bisect_right(log.arrival_s, now_s - window_s), bisect_right(log.arrival_s, now_s))
            n = len(reqs)
            lengths = np.fromiter((log.isl[i] for i in reqs), dtype=np.float64, count=n)
            isl_mean = float(lengths.mean()) if n else None
            g = c.gauges(pool)
            kv = g["kv_usage"]
            pools[pool] = PoolObservation(
                requests=float(n), rate_rps=n / window_s, isl_mean=isl_mean, osl_mean=done.osl_mean,
                ttft_ms_p50=ttft[0] if ttft else None, ttft_ms_p95=ttft[1] if ttft else None,
                ttft_ms_mean=ttft[2] if ttft else None,
                itl_ms_p50=itl[0] if itl else None, itl_ms_p95=itl[1] if itl else None,
                itl_ms_mean=itl[2] if itl else None,
                ttft_ms_at_sla=ttft[3] if ttft else None, itl_ms_at_sla=itl[3] if itl else None,
                ttft_counted=within["ttft_counted"], ttft_met=within["ttft_met"],
                itl_counted=within["itl_counted"], itl_met=within["itl_met"],
                queue=float(g["queue"]), running=float(g["running"]),
                kv_usage=None if math.isnan(kv) else float(kv), ready_replicas=int(g["ready"]), completed=done,
                isl_buckets=prompt_buckets(lengths))
        # Requests the router holds for want of a ready replica: live, its wake signal repeats while it holds
        # them (planner/service/wake.py). Without them a policy whose traffic stopped while its replicas
        # were still starting read as idle and went back to zero, failing every request it held.
        return Observation(at_s=now_s, window_s=window_s, pools=pools, waiting=c.held())


class SimActuator:
    """Applies replica targets to the simulated cluster; idempotent (same targets: no change)."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.changes = 0

    def apply(self, targets: Mapping[str, int]) -> Applied:
        before = self.c.apply(targets)
        after: dict[str, int] = {p: self.c.active(p) for p in self.c.pools}
        changed = any(before[p] != after[p] for p in self.c.pools)
        self.changes += int(changed)
        return Applied(before=before, after=after, changed=changed)
