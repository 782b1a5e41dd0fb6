"""Scoring a replay: SLA attainment per request, latency percentiles, GPU-hours, scaling activity.

Per request: met-TTFT = TTFT <= sla.ttft_ms; met-ITL = the request's *mean* inter-token latency
(time from first to last token / (OSL - 1)) <= sla.itl_ms (requests with OSL 1 meet it trivially);
failed requests (killed, or unfinished ``tail_s`` after the last arrival) miss both. With a warm-up
(``rep.score_from_s``), only the requests that arrived after it and the GPU time spent after it count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from planner.config import Policy
from planner.sim.evaluate.miss_stretch import worst_stretch
from planner.sim.evaluate.model_bias import AT_LOAD, model_bias
from planner.sim.evaluate.postures import postures
from planner.sim.evaluate.replay import Replay

MET_ITL = "request mean ITL ((last token - first token) / (OSL - 1)) <= sla.itl_ms"


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return {"p50": None, "p95": None, "p99": None}
    p = np.percentile(v, [50, 95, 99])
    return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "p99": round(float(p[2]), 3)}


def direction_changes(targets: Sequence[tuple[float, dict[str, int]]]) -> int:
    """Per pool, how often the sign of consecutive non-zero replica changes flips (up->down, down->up)."""
    flips = 0
    # Union of keys: a first tick that holds with unknown sizes (no data yet) carries no pools at all.
    pools = sorted({pool for _, tg in targets for pool in tg})
    for pool in pools:
        last_sign = 0
        prev = None
        for _, tg in targets:
            n = tg.get(pool)
            if n is None:
                continue
            if prev is not None and n != prev:
                sign = 1 if n > prev else -1
                if last_sign and sign != last_sign:
                    flips += 1
                last_sign = sign
            prev = n
    return flips


def met_targets(results: Mapping[str, np.ndarray], ttft_ms: float, itl_ms: float) -> tuple[np.ndarray, np.ndarray]:
    """Per request: whether it met the TTFT target and whether it met the ITL target (a failed request meets
    neither)."""
    ok = ~results["failed"].astype(bool)
    with np.errstate(invalid="ignore"):
        return ok & (results["ttft_s"] * 1e3 <= ttft_ms), ok & (results["itl_mean_s"] * 1e3 <= itl_ms)


def summarise(rep: Replay, policy: Policy, duration_s: float) -> dict:
    """Scores of one replay; with a warm-up (``rep.score_from_s``), only what arrived and ran after it."""
    scored = rep.results["arrival_s"] >= rep.score_from_s
    r = {k: v[scored] for k, v in rep.results.items()}
    all_ttft, all_itl = met_targets(rep.results, policy.sla.ttft_ms, policy.sla.itl_ms)
    failed = r["failed"]
    ok = ~failed
    with np.errstate(invalid="ignore"):
        ttft_ms = np.where(ok, r["ttft_s"] * 1e3, np.nan)
        itl_ms = np.where(ok, r["itl_mean_s"] * 1e3, np.nan)
    met_ttft, met_itl = all_ttft[scored], all_itl[scored]
    n = len(failed)
    hours = max(duration_s - rep.score_from_s, 1.0) / 3600.0
    targets = [(t, tg) for t, tg in rep.targets if t >= rep.score_from_s]
    peak: dict[str, int] = {}
    for _, tg in targets:
        for p, v in tg.items():
            peak[p] = max(peak.get(p, 0), v)
    if rep.score_from_s > 0:
        before = [tg for t, tg in rep.targets if t < rep.score_from_s][-1:]  # the targets scoring starts from
        seq = before + [tg for _, tg in targets]
        events = sum(1 for a, b in zip(seq, seq[1:], strict=False) if a != b)
    else:
        events = int(rep.scale_events)
    out: dict[str, Any] = {
        "requests": int(n),
        "attainment_ttft": round(float(met_ttft.mean()), 5) if n else None,
        "attainment_itl": round(float(met_itl.mean()), 5) if n else None,
        "attainment_joint": round(float((met_ttft & met_itl).mean()), 5) if n else None,
        "ttft_ms": _pcts(ttft_ms),
        "itl_ms": _pcts(itl_ms),
        "itl_max_gap_ms": _pcts(np.where(ok, r["itl_max_s"] * 1e3, np.nan)),
        "e2e_ms": _pcts(np.where(ok, r["e2e_s"] * 1e3, np.nan)),
        "gpu_hours": round(rep.gpu_hours, 4),
        # Where the GPU-hours went: prefill and decode are sized by different signals, and a policy's excess is
        # usually in one of them.
        "gpu_hours_by_pool": {p: round(h, 4) for p, h in rep.gpu_hours_by_pool.items()},
        "scale_events": events,
        "direction_changes_per_hour": round(direction_changes(targets) / hours, 3),
        "failed_requests": int(failed.sum()),
        "peak_replicas": peak,
    }
    bias = model_bias(rep.timeline, rep.score_from_s)
    if bias is not None:
        out["model_bias"] = bias
    at_load = model_bias(rep.timeline, rep.score_from_s, AT_LOAD)
    if at_load is not None:
        out["model_bias_at_load"] = at_load
    shares = postures(rep.decisions, rep.score_from_s)
    if shares is not None:
        out["postures"] = shares
    out["worst_misses"] = worst_stretch(rep.results["arrival_s"], ~(all_ttft & all_itl), rep.score_from_s, duration_s)
    return out


