"""Why a suite target was missed, read from the scenario's own report (issue 27: "report every target met or
missed with the reason").

A target's ``detail`` says by how much; ``why`` says where the figure came from, from the rows beside it:
- the planner's GPU-hours over the offline schedule's split into what not knowing the load costs (the planner
  over the same core fed the true load) and what sizing each interval at the percentile costs (fed the true load
  over the offline schedule, which spends the window's budget where it is cheapest), the attainment left above
  the percentile, and the error-budget postures the scored ticks spent in (planner/sim/evaluate/postures.py);
- a run below the percentile: the postures, the sizing model's bias at the load that came (realised over
  predicted above 1: sized short), how bursty the arrivals were (index of dispersion at 1 s; Poisson: 1) and the
  five minutes with the most misses (planner/sim/evaluate/miss_stretch.py);
- a frontier: the other policy's point that undercuts the planner's envelope, beside the planner's cheapest point
  attaining as much.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from planner.sim.evaluate.envelope import cost_at, pareto
from planner.sim.evaluate.miss_stretch import describe

PERFECT = "planner+perfect-forecast"  # the planner fed the true load (scenarios.py uses this name)
NOT_LEAN = ("burning", "recovering", "unmeasured", "held")


def _ratio(a: Mapping, b: Mapping | None) -> float | None:
    if b is None or not b.get("gpu_hours"):
        return None
    return float(a["gpu_hours"]) / float(b["gpu_hours"])


def postures_text(entry: Mapping) -> str | None:
    """'conservative on 21 % of scored ticks (burning 10 % at 13.0 GPUs, unmeasured 11 % at 14.0) against lean's
    11.51 GPUs'; None when the run carried no budget posture."""
    post = entry.get("postures")
    if not post:
        return None
    parts = [f"{name} {p['share']:.0%} at {p['mean_gpus']:.1f} GPUs" for name in NOT_LEAN
             if (p := post.get(name)) and p.get("share") and p.get("mean_gpus") is not None]
    lean = post.get("lean") or {}
    share = sum(float((post.get(n) or {}).get("share") or 0.0) for n in NOT_LEAN)
    lean_txt = f" against lean's {lean['mean_gpus']:.1f}" if lean.get("mean_gpus") is not None else ""
    if not parts:
        return "lean on every scored tick" + (f" ({lean['mean_gpus']:.1f} GPUs on average)"
                                              if lean.get("mean_gpus") is not None else "")
    return f"not lean on {share:.0%} of scored ticks ({', '.join(parts)}){lean_txt}"


def _bias_text(entry: Mapping) -> str | None:
    bias = entry.get("model_bias_at_load") or {}
    parts = [f"{k.upper()} median {b['median']:.2f}, p90 {b['p90']:.2f}" for k in ("ttft", "itl")
             if (b := bias.get(k)) and b.get("median") is not None and b.get("p90") is not None]
    return ("the sizing model at the load that came, realised over predicted: " + "; ".join(parts)) if parts else None


def _burst_text(report: Mapping) -> str | None:
    d = (report.get("trace") or {}).get("arrival_dispersion_1s")
    if d is None:
        return None
    return (f"arrivals' index of dispersion at 1 s {d:.2f} (Poisson: 1; the queueing model assumes Poisson)"
            if d > 1.5 else None)


def below_percentile(report: Mapping, entry: Mapping) -> str:
    """Why a run ended below the SLA's percentile."""
    worst = entry.get("worst_misses")
    parts = [t for t in (postures_text(entry), _bias_text(entry), _burst_text(report),
                         worst and "the worst five minutes: " + describe(worst)) if t]
    att_t, att_i = entry.get("attainment_ttft"), entry.get("attainment_itl")
    if att_t is not None and att_i is not None:
        parts.insert(0, f"TTFT attained {att_t:.2%}, ITL {att_i:.2%}")
    return "; ".join(parts)


def over_offline(report: Mapping, name: str, pct: float) -> str:
    """Why ``name`` (the planner or the planner fed the true load) spent more than its ratio of the offline
    schedule's GPU-hours."""
    pols, off = report["policies"], report["references"]["offline"]
    entry = pols[name]
    perfect = pols.get(PERFECT)
    parts = []
    total = _ratio(entry, off)
    if name != PERFECT and perfect is not None and total is not None:
        forecast, sizing = _ratio(entry, perfect), _ratio(perfect, off)
        if forecast is not None and sizing is not None:
            parts.append(f"{total:.2f}x = {forecast:.2f}x for not knowing the load (over {PERFECT}) x {sizing:.2f}x "
                         f"for sizing each interval at the percentile ({PERFECT} over the offline schedule)")
    spare = float(entry["attainment_joint"] or 0.0) - pct / 100.0
    if spare > 0:
        parts.append(f"{spare * 100:.2f} points of attainment above p{pct:g} unspent (the offline schedule: "
                     f"{float(off['attainment_joint']):.2%})")
    post = postures_text(entry)
    if post:
        parts.append(post)
    return "; ".join(parts)


def _label(point: Mapping) -> str:
    value = point.get("value")
    return f"{point.get('knob', '?')} {value:g}" if isinstance(value, (int, float)) else str(point.get("knob", "?"))


def _where(points: Sequence[Mapping], a: float) -> tuple[float, str]:
    """The envelope's GPU-hours at attainment ``a`` and the Pareto points it is read from."""
    front = pareto(points)
    cost = cost_at(front, a)
    named = {(float(p["gpu_hours"]), float(p["attainment_joint"] or 0.0)): p for p in points}

    def show(g: float, att: float) -> str:
        return f"{_label(named[(g, att)])}: {att:.2%} on {g:.2f}"
    if not front or not math.isfinite(cost):
        return cost, "never reached"
    if a <= front[0][1]:
        return cost, f"its cheapest point, {show(*front[0])}"
    for lo, hi in zip(front, front[1:], strict=False):
        if lo[1] < a <= hi[1]:
            return cost, f"between {show(*lo)} and {show(*hi)}"
    return cost, show(*front[-1])


def frontier_text(frontier: Mapping) -> str:
    """For each span where a Dynamo frontier undercuts the planner's: at the span's worst level, what each
    envelope costs and the points it is read from (envelopes join Pareto points in log-odds of attainment)."""
    pols = frontier.get("policies", {})
    mine = pols.get("planner", {}).get("points", [])
    my_front = pareto(mine)
    out = []
    for c in frontier.get("comparisons", []):
        theirs = pols.get(c["other"], {}).get("points", [])
        their_front = pareto(theirs)
        for span in c.get("not_above", []):
            if span.get("worst_gpu_hours_over") is None:
                best = max((float(p["attainment_joint"] or 0.0) for p in mine), default=0.0)
                out.append(f"{span['from']:.2%}-{span['to']:.2%}: {c['other']} reaches it, the planner's best point "
                           f"attains {best:.2%}")
                continue
            levels = [float(x) for x in np.linspace(span["from"], span["to"], 25)]
            worst = max(levels, key=lambda a: cost_at(my_front, a) / max(cost_at(their_front, a), 1e-12))
            (c_us, us), (c_them, them) = _where(mine, worst), _where(theirs, worst)
            out.append(f"at {worst:.2%} {c['other']} needs {c_them:.2f} GPU-h ({them}) where the planner needs "
                       f"{c_us:.2f} ({us})")
    return "; ".join(out)
