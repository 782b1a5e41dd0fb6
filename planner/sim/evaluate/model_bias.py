"""How far the sizing model is from what its sizes deliver: realised latency / predicted latency.

Per timeline sample (replay.py), the decision in force predicted a latency at the SLA percentile for the sizes
it chose (TTFT for the prefill pool, ITL for the decode pool; both for an aggregated pool), at the load it
forecast; the window then realised its own latency at that percentile. A ratio near 1 means the model spends
the SLA it sizes for; 0.5 means the pool delivers half the target where the model said it would deliver all
of it, so it was sized larger than needed. Only scored samples with at least ``MIN_REQUESTS`` first tokens
count: a percentile of a handful of requests is noise.

That ratio (``model_bias``) mixes the model's own error with the forecast's headroom (the quantile sized for,
above the load that came) and the sizes the scale-down hedge held. ``model_bias_at_load`` takes the headroom
out: the same model, with the calibration factors in force, asked for the latency of the replicas that were
ready at the load that arrived in the sample's window (its rate, mean lengths and prompt-length mix).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from planner.decide.capacity import Load
from planner.decide.decider import latency_of_ready
from planner.decide.spec import DeciderSpec
from planner.sim.cluster.metrics import prompt_buckets
from planner.sim.traces.records import RequestTrace
from planner.types import Decision, LengthMix, Pool

MIN_REQUESTS = 20
# (signal, realised column, predicted columns in the order tried): at the forecast's load, at the load that came.
SIGNALS = (("ttft", "ttft_ms_at_sla", ("prefill.predicted_ms", "aggregated.predicted_ms")),
           ("itl", "itl_ms_at_sla", ("decode.predicted_ms", "aggregated.predicted_itl_ms")))
AT_LOAD = (("ttft", "ttft_ms_at_sla", ("prefill.predicted_at_load_ms", "aggregated.predicted_at_load_ms")),
           ("itl", "itl_ms_at_sla", ("decode.predicted_at_load_ms", "aggregated.predicted_itl_at_load_ms")))
Signals = tuple[tuple[str, str, tuple[str, ...]], ...]


def window_load(trace: RequestTrace, t_s: float, window_s: float) -> tuple[Load, LengthMix | None] | None:
    """The load that arrived in (t - window, t]: its rate, mean prompt and output lengths, and its prompt-length
    mix in the engines' histogram buckets (None: no request arrived)."""
    lo, hi = np.searchsorted(trace.arrival_s, [t_s - window_s, t_s], side="right")
    if hi <= lo:
        return None
    isl = trace.isl[lo:hi]
    load = Load((hi - lo) / window_s, float(isl.mean()), float(trace.osl[lo:hi].mean()))
    return load, LengthMix.from_buckets(prompt_buckets(isl))


def predicted_at_load(spec: DeciderSpec, in_force: Decision | None, ready: Mapping[str, float],
                      arrived: tuple[Load, LengthMix | None] | None) -> dict[str, float]:
    """Timeline columns ``<pool>.predicted_at_load_ms`` (and ``aggregated.predicted_itl_at_load_ms``): what the
    model with the decision's calibration factors predicts for the ready replicas at the window's own load; NaN
    without a decision that sized (a hold records no factors), ready replicas or arrivals."""
    at = {} if arrived is None else latency_of_ready(spec, arrived[0], arrived[1],
                                                      {p: int(n) for p, n in ready.items()}, in_force)
    out: dict[str, float] = {}
    for pool in spec.pools:
        ttft, itl = at.get(pool, (None, None))
        out[f"{pool}.predicted_at_load_ms"] = _finite(itl if pool is Pool.DECODE else ttft)
        if pool is Pool.AGGREGATED:
            out["aggregated.predicted_itl_at_load_ms"] = _finite(itl)
    return out


def _finite(v: float | None) -> float:
    return float(v) if v is not None and math.isfinite(v) else math.nan


def ratios(timeline: Sequence[Mapping[str, float]], score_from_s: float, signal: str,
           signals: Signals = SIGNALS) -> np.ndarray:
    """Realised / predicted for ``signal`` ("ttft" or "itl") over the scored samples that have both;
    ``signals``: SIGNALS (at the forecast's load) or AT_LOAD (at the load that came)."""
    _, realised_key, predicted_keys = next(s for s in signals if s[0] == signal)
    out = []
    for row in timeline:
        if row["t_s"] < score_from_s or row.get("first_tokens", 0.0) < MIN_REQUESTS:
            continue
        predicted = next((row[k] for k in predicted_keys if k in row and math.isfinite(row[k])), math.nan)
        realised = row.get(realised_key, math.nan)
        if math.isfinite(realised) and math.isfinite(predicted) and predicted > 0:
            out.append(realised / predicted)
    return np.asarray(out, dtype=np.float64)


def model_bias(timeline: Sequence[Mapping[str, float]], score_from_s: float,
               signals: Signals = SIGNALS) -> dict[str, dict] | None:
    """``{ttft: {median, p10, p90, intervals}, itl: {...}}``; None when the policy predicts nothing (a
    baseline without a latency model)."""
    out: dict[str, dict] = {}
    for signal, _, _ in signals:
        r = ratios(timeline, score_from_s, signal, signals)
        if len(r):
            p10, p50, p90 = np.percentile(r, [10, 50, 90])
            out[signal] = {"median": round(float(p50), 4), "p10": round(float(p10), 4),
                           "p90": round(float(p90), 4), "intervals": int(len(r))}
    return out or None
