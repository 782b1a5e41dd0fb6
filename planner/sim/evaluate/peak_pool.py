"""A static pool sized at a model's peak: the smallest fixed pool that meets the SLA over the trace's busiest
``PEAK_WINDOW_S``, found by replaying that window (what a team that sizes for its peak runs, and a yardstick
that does not move with any autoscaler: the fleet's ``comparisons.static_peak``).

The search starts where the what-if sizing (``planner plan``) puts the window's steady load (its request rate
and mean lengths), adds a replica at a time to the pool whose target missed more (TTFT: prefill, ITL: decode)
until the window's joint attainment reaches the SLA's percentile, then takes replicas off, the pool with the
most GPUs per replica first, while it holds. Each step is one replay of the window with ``LEAD_S`` of the
arrivals before it run unscored (the pool is already busy when the peak begins, as a static pool is). Floors
are one replica per pool (a static pool never sleeps) or the policy's floor; ceilings are the policy's.

Why not the peak an autoscaler reached (the fleet's yardstick before 2026-12-04): that peak carries its
overshoot, so a planner that overshot less lowered its own yardstick (a smoother calibration: the same fleet
GPU-hours read 0.51x of one and 0.55x of the other).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from planner.decide.whatif import plan
from planner.fleet_file import FleetMember
from planner.sim.evaluate.replay import Replay
from planner.sim.evaluate.scoring import summarise
from planner.sim.traces.records import RequestTrace

PEAK_WINDOW_S = 600.0  # capacity planning's usual grain: 10 minutes (static-yesterday's too)
LEAD_S = 300.0  # arrivals before the window, run unscored so the window starts on a loaded pool
R = TypeVar("R")
MAX_STEPS = 200  # replicas added before giving up (a pool the SLA cannot be met with at any size)


@dataclass(frozen=True)
class PeakPool:
    targets: dict[str, int]  # replicas per pool
    gpus: dict[str, int]  # GPUs per replica
    window_s: tuple[float, float]  # the busiest window, trace time
    attainment: float | None  # joint attainment over the window at ``targets``
    replays: int  # replays the search ran


def busiest_window(trace: RequestTrace, since_s: float, window_s: float = PEAK_WINDOW_S) -> tuple[float, float]:
    """[start, start + window_s): the window holding the most arrivals, starting at an arrival at or after
    ``since_s`` (the scored part of a run); the first such window on a tie."""
    t = trace.arrival_s[trace.arrival_s >= since_s]
    if len(t) == 0:
        return since_s, since_s + window_s
    counts = np.searchsorted(t, t + window_s, side="left") - np.arange(len(t))
    start = float(t[int(np.argmax(counts))])
    return start, start + window_s


def peak_pool(m: FleetMember, trace: RequestTrace, since_s: float,
              run: Callable[[RequestTrace, Mapping[str, int], Mapping[str, int], float], Replay]) -> PeakPool:
    """The smallest static pool meeting ``m``'s SLA over the busiest window of ``trace`` after ``since_s``;
    ``run(trace, targets, gpus_per_replica, score_from_s)`` replays a static pool."""
    start, end = busiest_window(trace, since_s)
    peak = trace.window(max(0.0, start - LEAD_S), end)
    inside = trace.window(start, end)
    percentile = m.policy.sla.percentile / 100.0
    if len(inside) == 0:
        lowest = {str(p.value): max(1, m.policy.pool(p).min_replicas) for p in m.policy.pool_names()}
        return PeakPool(lowest, {p: 1 for p in lowest}, (start, end), None, 0)
    need = plan(m.policy.decision(), m.profile, len(inside) / (end - start), float(inside.isl.mean()),
                float(inside.osl.mean()))
    gpus: dict[str, int] = {p: pd.gpus_per_replica for p, pd in need.pools.items()}
    floors: dict[str, int] = {p: max(1, m.policy.pool(p).min_replicas) for p in need.pools}
    ceilings: dict[str, int] = {p: m.policy.pool(p).max_replicas for p in need.pools}
    held: dict[str, int] = {p: min(ceilings[p], max(floors[p], pd.replicas)) for p, pd in need.pools.items()}
    replays = 0

    def scores(targets: Mapping[str, int]) -> dict:
        nonlocal replays
        replays += 1
        return summarise(run(peak, targets, gpus, start), m.policy, end)

    def meets(s: dict) -> bool:
        return s["attainment_joint"] is not None and s["attainment_joint"] >= percentile

    s = scores(held)
    for _ in range(MAX_STEPS):
        if meets(s):
            break
        grow = _short_pool(held, s, ceilings)
        if grow is None:
            break
        held = {**held, grow: held[grow] + 1}
        s = scores(held)
    if not meets(s):
        return PeakPool(held, gpus, (start, end), s["attainment_joint"], replays)

    def if_met(fewer: dict[str, int]) -> dict | None:
        trial = scores(fewer)
        return trial if meets(trial) else None

    held, smaller = trim(held, gpus, floors, if_met)
    return PeakPool(held, gpus, (start, end), (smaller or s)["attainment_joint"], replays)


def trim(held: Mapping[str, int], gpus: Mapping[str, int], floors: Mapping[str, int],
         attempt: Callable[[dict[str, int]], R | None]) -> tuple[dict[str, int], R | None]:
    """A replica at a time off a pool (the one with the most GPUs per replica first, never below its floor)
    while ``attempt`` of the smaller pool succeeds (its result; None: it missed). The pool it ends at and the
    last success (None: no replica could go)."""
    held, last = dict(held), None
    found = True
    while found:
        found = False
        for p in sorted(held, key=lambda p: -gpus[p]):
            if held[p] <= floors[p]:
                continue
            fewer = {**held, p: held[p] - 1}
            result = attempt(fewer)
            if result is not None:
                held, last, found = fewer, result, True
                break
    return held, last


def _short_pool(held: Mapping[str, int], s: dict, ceilings: Mapping[str, int]) -> str | None:
    """The pool to grow: the one whose target missed more (TTFT: the front pool, ITL: decode), below its
    ceiling; None when no pool can grow."""
    if len(held) == 1:
        (only,) = held
        return only if held[only] < ceilings[only] else None
    ttft, itl = s["attainment_ttft"] or 0.0, s["attainment_itl"] or 0.0
    order = ["prefill", "decode"] if ttft <= itl else ["decode", "prefill"]
    return next((p for p in order if p in held and held[p] < ceilings[p]), None)
