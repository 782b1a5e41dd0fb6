"""How many of a window's observations met an SLA target, read from a latency histogram's buckets (pure).

The error budget (PoolObservation.ttft_counted/met, itl_counted/met) needs, per window, how many
observations were counted and how many of them were at or under the target. A histogram knows only the
cumulative count at each bucket bound ``le``, so the count at a target between two bounds is linearly
interpolated, as ``histogram_quantile`` interpolates a quantile inside its bucket: with vLLM's TTFT
buckets (0.1, 0.25] s holding 20 of 100 requests (80 at or under 0.1 s, 100 at or under 0.25 s), a 200 ms
target reads 80 + 20 * (0.2 - 0.1) / (0.25 - 0.1) = 93.3 met.

Precision: the true count lies between the cumulative counts at the two bounds around the target, and so
does the interpolated one; the error is therefore at most the observations inside that bucket (all of
them only when they all sit at one end). It is exact when the target is on a bound (``le`` is inclusive)
or the bucket is empty. How wide that bucket is relative to the target is what
PoolObservation.*_p95_resolution reports (resolution.py; for a target on a bound it names the bucket the
bound closes, though the count there is exact): vLLM puts a 40 ms ITL target in (25, 50] ms (62.5 % of
the target) and a 200 ms TTFT target in (100, 250] ms (75 %).

Past the last finite bound the ``+Inf`` bucket cannot be split (histogram_quantile answers the last finite
bound there): met is the cumulative count at the last finite bound, so the ``+Inf`` bucket's observations
count as missed - a lower bound, conservative for an error budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

_SLACK = 1e-9  # float noise allowed in a cumulative count that should never decrease


def met_at(cumulative: Iterable[tuple[float, float]], target_s: float) -> float | None:
    """The cumulative count at ``target_s`` of a histogram given as (``le`` in seconds, cumulative count)
    samples, interpolated between the bounds around it; None when it cannot be told: no finite bound (only
    ``+Inf``, or no bucket series at all), a NaN or infinite count, or counts that fall as ``le`` rises (a
    reset the window deltas did not undo)."""
    points = sorted(cumulative)
    if any(math.isnan(le) or not math.isfinite(c) for le, c in points):
        return None
    if any(b[1] < a[1] - _SLACK for a, b in zip(points, points[1:], strict=False)):
        return None
    finite = [(le, c) for le, c in points if math.isfinite(le)]
    if not finite:  # only the +Inf bucket (or none): nothing is known about any observation's latency
        return None
    lower_s, below = 0.0, 0.0  # as in histogram_quantile, the first bucket starts at 0
    for le, count in finite:
        if target_s <= le:
            if le <= lower_s:  # a bucket of zero width (bound 0): nothing to interpolate
                return count
            return below + (count - below) * (target_s - lower_s) / (le - lower_s)
        lower_s, below = le, count
    return below  # past the last finite bound: the +Inf bucket's observations count as missed


def attainment(count: float | None, cumulative: Iterable[tuple[float, float]],
               target_ms: float | None) -> tuple[float, float] | None:
    """(counted, met) for one window: ``count`` is the window's increase of the histogram's ``_count``,
    ``cumulative`` its buckets' increases by ``le``. None (not measured, never "all met" or "all missed")
    without a target, without a count or with a NaN/infinite one, or with observations but no usable
    buckets. A count series that exists and did not increase is (0.0, 0.0): nothing counted, measured.
    ``met`` is clamped into [0, counted]."""
    if target_ms is None or count is None or not math.isfinite(count):
        return None
    counted = max(0.0, count)
    if counted == 0.0:
        return 0.0, 0.0
    met = met_at(cumulative, target_ms / 1e3)
    if met is None:
        return None
    return counted, min(counted, max(0.0, met))
