"""How far the sizing model is from what its sizes deliver: realised latency / predicted latency.

Per timeline sample (replay.py), the decision in force predicted a latency at the SLA percentile for the sizes
it chose (TTFT for the prefill pool, ITL for the decode pool; both for an aggregated pool), at the load it
forecast; the window then realised its own latency at that percentile. A ratio near 1 means the model spends
the SLA it sizes for; 0.5 means the pool delivers half the target where the model said it would deliver all
of it, so it was sized larger than needed. Only scored samples with at least ``MIN_REQUESTS`` first tokens
count: a percentile of a handful of requests is noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

MIN_REQUESTS = 20
SIGNALS = (("ttft", "ttft_ms_at_sla", ("prefill.predicted_ms", "aggregated.predicted_ms")),
           ("itl", "itl_ms_at_sla", ("decode.predicted_ms", "aggregated.predicted_itl_ms")))


def ratios(timeline: Sequence[Mapping[str, float]], score_from_s: float, signal: str) -> np.ndarray:
    """Realised / predicted for ``signal`` ("ttft" or "itl") over the scored samples that have both."""
    _, realised_key, predicted_keys = next(s for s in SIGNALS if s[0] == signal)
    out = []
    for row in timeline:
        if row["t_s"] < score_from_s or row.get("first_tokens", 0.0) < MIN_REQUESTS:
            continue
        predicted = next((row[k] for k in predicted_keys if k in row and math.isfinite(row[k])), math.nan)
        realised = row.get(realised_key, math.nan)
        if math.isfinite(realised) and math.isfinite(predicted) and predicted > 0:
            out.append(realised / predicted)
    return np.asarray(out, dtype=np.float64)


def model_bias(timeline: Sequence[Mapping[str, float]], score_from_s: float) -> dict[str, dict] | None:
    """``{ttft: {median, p10, p90, intervals}, itl: {...}}``; None when the policy predicts nothing (a
    baseline without a latency model)."""
    out: dict[str, dict] = {}
    for signal, _, _ in SIGNALS:
        r = ratios(timeline, score_from_s, signal)
        if len(r):
            p10, p50, p90 = np.percentile(r, [10, 50, 90])
            out[signal] = {"median": round(float(p50), 4), "p10": round(float(p10), 4),
                           "p90": round(float(p90), 4), "intervals": int(len(r))}
    return out or None
