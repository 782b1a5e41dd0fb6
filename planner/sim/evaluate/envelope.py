"""Where one attainment/GPU-hour frontier lies above another.

A frontier's lower envelope gives, for each joint attainment ``a``, the fewest GPU-hours the policy was
seen to need for at least ``a``: its Pareto points (no other point both cheaper and attaining more), joined
by straight lines in (log-odds of attainment, GPU-hours), the axis on which 90 %, 99 % and 99.9 % are equally
far apart. Below its least-attaining Pareto point the envelope is that point's cost (nothing cheaper was
measured); above its best attainment it is infinite (never reached).

Frontier A lies above frontier B at ``a`` when A's envelope costs no more there (on a plot with attainment
up and GPU-hours across, A's curve is above or left of B's). The comparison is made on a log-odds grid over
``RANGE``; levels neither reaches do not count either way and are reported separately.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

RANGE = (0.90, 0.999)
LEVELS = 241  # grid points over RANGE in log-odds: about one per 0.04 % at 99.9 %


def logit(a: float) -> float:
    a = min(max(a, 1e-12), 1.0 - 1e-12)
    return math.log(a / (1.0 - a))


def pareto(points: Sequence[Mapping]) -> list[tuple[float, float]]:
    """(GPU-hours, attainment) of the points no other point beats on both, cheapest first; attainment rises."""
    pts = sorted(((float(p["gpu_hours"]), float(p["attainment_joint"] or 0.0)) for p in points),
                 key=lambda x: (x[0], -x[1]))
    out: list[tuple[float, float]] = []
    for g, a in pts:
        if not out or a > out[-1][1]:
            out.append((g, a))
    return out


def cost_at(front: Sequence[tuple[float, float]], a: float) -> float:
    """GPU-hours the envelope needs for attainment ``a`` (inf when the frontier never reaches it)."""
    if not front or a > front[-1][1]:
        return math.inf
    if a <= front[0][1]:
        return front[0][0]
    for (g0, a0), (g1, a1) in zip(front, front[1:], strict=False):
        if a0 < a <= a1:
            share = (logit(a) - logit(a0)) / (logit(a1) - logit(a0))
            return g0 + (g1 - g0) * share
    return math.inf  # not reached: a is above every point (handled above)


def _levels(lo: float, hi: float) -> np.ndarray:
    x = np.linspace(logit(lo), logit(hi), LEVELS)
    return 1.0 / (1.0 + np.exp(-x))


def compare(name: str, points: Sequence[Mapping], other: str, other_points: Sequence[Mapping],
            lo: float = RANGE[0], hi: float = RANGE[1]) -> dict:
    """Whether ``name``'s envelope costs no more than ``other``'s at every attainment level in [lo, hi] that
    either reaches; the ranges where it does not, each with why."""
    mine, theirs = pareto(points), pareto(other_points)
    levels = _levels(lo, hi)
    mine_c = np.array([cost_at(mine, float(a)) for a in levels])
    theirs_c = np.array([cost_at(theirs, float(a)) for a in levels])
    reached = np.isfinite(mine_c) | np.isfinite(theirs_c)
    dearer = np.isfinite(mine_c) & (mine_c > theirs_c * (1 + 1e-9))
    short = ~np.isfinite(mine_c) & np.isfinite(theirs_c)
    best = f"best {mine[-1][1]:.3%}" if mine else "no points"
    spans: list[dict[str, Any]] = []
    for i, j in _runs(dearer):
        over = round(float(np.max(mine_c[i:j + 1] / theirs_c[i:j + 1])), 4)
        spans.append(_span(levels, i, j, f"{other} needs less", over))
    spans += [_span(levels, i, j, f"{name} never reaches it ({best})", None) for i, j in _runs(short)]
    spans.sort(key=lambda x: x["from"])
    unreached = [float(a) for a, r in zip(levels, reached, strict=True) if not r]
    return {"policy": name, "other": other, "range": [lo, hi],
            "above_everywhere": bool(reached.any() and not spans),
            "not_above": spans, "neither_reaches_from": round(unreached[0], 6) if unreached else None}


def _span(levels: np.ndarray, i: int, j: int, why: str, over: float | None) -> dict[str, Any]:
    return {"from": round(float(levels[i]), 6), "to": round(float(levels[j]), 6), "worst_gpu_hours_over": over,
            "why": why}


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[first, last] index of each run of True."""
    out: list[tuple[int, int]] = []
    start = None
    for i, v in enumerate(mask):
        if v and start is None:
            start = i
        if not v and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(mask) - 1))
    return out


def describe(c: Mapping) -> str:
    """One line: 'planner above dynamo-load everywhere in 90-99.9 %' or where it is not."""
    lo, hi = c["range"]
    head = f"{c['policy']} vs {c['other']} in {lo:.1%}-{hi:.1%}: "
    if c["above_everywhere"]:
        text = head + "above everywhere"
    elif not c["not_above"]:
        text = head + "neither frontier reaches this range"
    else:
        parts = [f"{s['from']:.2%}-{s['to']:.2%} ({s['why']}"
                 + (f", up to {s['worst_gpu_hours_over']:.2f}x its GPU-h" if s["worst_gpu_hours_over"] else "") + ")"
                 for s in c["not_above"]]
        text = head + "NOT above at " + "; ".join(parts)
    if c.get("neither_reaches_from") is not None:
        text += f"; neither reaches {c['neither_reaches_from']:.2%} or more"
    return text
