"""Where a replay's misses came from: the stretch of the scored window that holds the most of them.

A window that ends below its SLA's percentile usually owes it to a few minutes, not to a thin spread over the
hour: a step or a return after a lull met by pools a start-up too small misses every request for two to four
minutes, more than an hour's budget (docs/benchmark-studies.md, "Held-out hours no lever was checked on"). The
stretch, its share of the window's misses and the arrival rate in it against the minutes before say which one a
miss was, without a replay script. Reported per policy as ``report.json`` ``policies.<name>.worst_misses`` and,
for the hours below the SLA, under ``planner bench hours``' table.
"""

from __future__ import annotations

import numpy as np

STRETCH_S = 300.0  # five minutes: a 120 s start-up, the read that sees the step and the queue's drain
BEFORE_S = 600.0  # the arrival rate in the stretch is read against this long before it
STEP_S = 30.0  # the stretch's start is on this grid from the scored window's start (a control interval)


def worst_stretch(arrival_s: np.ndarray, missed: np.ndarray, score_from_s: float, end_s: float,
                  length_s: float = STRETCH_S, before_s: float = BEFORE_S, step_s: float = STEP_S) -> dict | None:
    """The ``length_s`` stretch of the scored window [score_from_s, end_s) with the most missed requests (by
    arrival), from its first ``step_s`` step that holds a tenth of its densest step's misses (a scattered miss
    before a burst does not pull it earlier); None when no scored request missed.

    ``start_s`` is seconds into the scored window. ``rate_vs_before``: the stretch's arrival rate over the rate in
    the ``before_s`` seconds before it (the warm-up counts; the replay's start bounds it, and ``before_s`` in the
    result says how long it was), None with under ``step_s`` of it or no arrival in it.
    """
    if len(arrival_s) != len(missed):
        raise ValueError(f"arrival_s and missed differ in length: {len(arrival_s)} and {len(missed)}")
    arrivals = np.sort(np.asarray(arrival_s, dtype=float))
    misses = np.sort(_arrivals_of(arrival_s, missed, score_from_s))
    if len(misses) == 0:
        return None
    last = max(score_from_s, end_s - length_s)
    starts = score_from_s + step_s * np.arange(int(np.floor((last - score_from_s) / step_s)) + 1)
    counts = _count(misses, starts, starts + length_s)
    best = float(starts[int(np.argmax(counts))])
    # The stretch begins where its misses do, not where a scattered one before them happens to fall: at the first
    # step of the best window that holds a tenth of its densest step's misses.
    bins = best + step_s * np.arange(int(round(length_s / step_s)))
    per_step = _count(misses, bins, bins + step_s)
    dense = int(np.argmax(per_step >= max(1.0, 0.1 * float(per_step.max()))))
    start = float(min(bins[dense], last))
    n = int(_count(misses, start, start + length_s))
    lo = max(0.0, start - before_s)
    span = min(length_s, end_s - start)  # a scored window shorter than the stretch ends it
    inside = int(_count(arrivals, start, start + span))
    before = int(_count(arrivals, lo, start))
    ratio = (inside / span) / (before / (start - lo)) if start - lo >= step_s and before > 0 and span > 0 else None
    return {"start_s": round(start - score_from_s, 1), "length_s": length_s, "misses": n,
            "share_of_misses": round(n / len(misses), 4), "requests": inside,
            "rate_vs_before": None if ratio is None else round(ratio, 3), "before_s": round(start - lo, 1)}


def _arrivals_of(arrival_s: np.ndarray, missed: np.ndarray, score_from_s: float) -> np.ndarray:
    """The arrival times of the scored requests that missed."""
    a = np.asarray(arrival_s, dtype=float)
    return a[(a >= score_from_s) & np.asarray(missed, dtype=bool)]


def _count(sorted_s: np.ndarray, lo: np.ndarray | float, hi: np.ndarray | float) -> np.ndarray:
    """How many of ``sorted_s`` lie in [lo, hi) (each, for arrays of bounds)."""
    return np.searchsorted(sorted_s, hi, "left") - np.searchsorted(sorted_s, lo, "left")


def describe(stretch: dict) -> str:
    """One line: '10,144 of its misses (95 %) in minutes 0-5 of the scored window; arrivals there 2.0x the 10
    minutes before'."""
    a = stretch["start_s"] / 60.0
    b = a + stretch["length_s"] / 60.0
    text = (f"{stretch['misses']:,} of its misses ({stretch['share_of_misses']:.0%}) in minutes {a:g}-{b:g} of the "
            "scored window")
    if stretch["rate_vs_before"] is not None:
        text += f"; arrivals there {stretch['rate_vs_before']:.2f}x the {stretch['before_s'] / 60:g} minutes before"
    return text
