"""How bursty the arrival rate is: its coefficient of variation beyond what Poisson counting explains. PURE.

A rate read over a ``window_s`` window from Poisson arrivals at a true, constant rate r varies by r/window_s
(its variance) from counting alone: 3 % of a 33 req/s rate over 60 s, 13 % of 1 req/s. That noise says
nothing about how the load moves, so it is taken out before the coefficient of variation is formed:

    cv = sqrt(max(0, var(rates) - mean(rates) / window_s)) / mean(rates)

Over 10 minutes it sets the suite's steady scenarios far apart from Azure code, whose load is on/off from one
minute to the next (docs/benchmark-studies.md, "Scale-down rules for steady traffic, and one seed's luck",
has the medians; ``planner bench seeds`` prints them).

A level shift counts in that spread too: a rate that steps up fourfold and stays there reads as bursty for most
of the time the step is inside ``over_s`` (a 4x step half-way through: cv 0.6; above 0.3 for 8 of 10 minutes),
though from one reading to the next it no longer moves. ``rate_swing_cv`` measures the swings instead: the spread of successive differences (von
Neumann's mean square successive difference, half of it, estimates the variance a steady level would have and
a trend or a step barely moves), with the counting noise of two overlapping windows taken out:

    swing = sqrt(max(0, mean((r[i+1] - r[i])^2) / 2 - mean(rates) * min(dt, window_s) / window_s^2)) / mean(rates)

(two rates read ``dt`` apart over ``window_s`` windows share all but ``min(dt, window_s)`` of their seconds, so
their difference's counting variance is 2 r min(dt, window_s) / window_s^2). On/off load swings between readings
and scores high either way (Azure code: 0.47 median against 0.79), a step scores once and is diluted within
minutes (docs/benchmark-studies.md, issue 27's levers: "Burstiness by its swing").

``rate_rise`` reads the other side of a burst: how far the latest reading rose over the one before it, where
the rise is beyond what counting explains. The decision gives no capacity back on such a tick (behavior.rise_hold):
the hedge's window only asks that the recommendations were low for its length, and at the end of a lull the
tick the next burst starts still recommends the lull's size (README, "No scale-down into a rising load").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_SAMPLES = 4  # fewer windows than this say nothing about a spread
# A rise counts when it is this many standard deviations of two windows' counting noise: at 3, steady Poisson
# load reads as rising on about one tick in 700.
RISE_Z = 3.0


def _readings(times_s: Sequence[float], rates_rps: Sequence[float], now_s: float, over_s: float,
              window_s: float) -> list[tuple[float, float]] | None:
    """The finite, non-negative readings in (now_s - over_s, now_s]; None when too few to say (see rate_cv)."""
    if window_s <= 0 or over_s <= 0:
        raise ValueError(f"window_s and over_s must be > 0, got {window_s!r} and {over_s!r}")
    since = now_s - over_s
    kept = [(t, r) for t, r in zip(times_s, rates_rps, strict=True)
            if t > since and t <= now_s and math.isfinite(r) and r >= 0]
    if len(kept) < MIN_SAMPLES or now_s - kept[0][0] < over_s / 2:
        return None
    return kept


def rate_cv(times_s: Sequence[float], rates_rps: Sequence[float], now_s: float, over_s: float,
            window_s: float) -> float | None:
    """The excess coefficient of variation of the rates observed in (now_s - over_s, now_s].

    None (unknown) when the history covers less than half of ``over_s`` or has fewer than MIN_SAMPLES finite
    readings: a burst the history has not yet shown must not be ruled out. 0.0 when every reading is zero.
    """
    kept = _readings(times_s, rates_rps, now_s, over_s, window_s)
    if kept is None:
        return None
    values = [r for _, r in kept]
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / len(values)
    excess = max(0.0, var - mean / window_s)
    return math.sqrt(excess) / mean


def rate_swing_cv(times_s: Sequence[float], rates_rps: Sequence[float], now_s: float, over_s: float,
                  window_s: float) -> float | None:
    """The excess swing of the rates observed in (now_s - over_s, now_s], relative to their mean (module doc).

    None and 0.0 as ``rate_cv``; the readings' spacing is the median gap between their times.
    """
    kept = _readings(times_s, rates_rps, now_s, over_s, window_s)
    if kept is None:
        return None
    values = [r for _, r in kept]
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    gap_s = statistics.median(b[0] - a[0] for a, b in zip(kept, kept[1:], strict=False))
    half_mssd = sum((b - a) ** 2 for a, b in zip(values, values[1:], strict=False)) / (2 * (len(values) - 1))
    excess = max(0.0, half_mssd - _difference_noise_var(mean, gap_s, window_s) / 2.0)
    return math.sqrt(excess) / mean


def _difference_noise_var(rate_rps: float, dt_s: float, window_s: float) -> float:
    """The counting variance of the difference of two ``window_s`` rates read ``dt_s`` apart (module doc)."""
    return 2.0 * rate_rps * min(dt_s, window_s) / window_s**2


MEASURES = {"level": rate_cv, "swing": rate_swing_cv}


def rate_rise(times_s: Sequence[float], rates_rps: Sequence[float], window_s: float,
              max_gap_s: float) -> float | None:
    """The latest reading's rise over the one before it, as a share of the earlier one (0.5: half again).

    0.0 when it fell, or rose by no more than ``RISE_Z`` standard deviations of the counting noise of two
    ``window_s`` windows read ``dt`` apart (their difference's variance is 2 r min(dt, window_s) / window_s^2, the
    module doc); None (unknown) when the last two readings are not both finite and non-negative, or lie more than
    ``max_gap_s`` apart. An earlier rate of zero counts as one request per window, so the share stays finite.
    """
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    if len(times_s) < 2 or len(rates_rps) < 2:
        return None
    (t0, t1), (r0, r1) = times_s[-2:], rates_rps[-2:]
    if not all(math.isfinite(r) and r >= 0 for r in (r0, r1)) or not 0 < t1 - t0 <= max_gap_s:
        return None
    noise = math.sqrt(_difference_noise_var(max(r0, 1.0 / window_s), t1 - t0, window_s))
    if r1 - r0 <= RISE_Z * noise:
        return 0.0
    return (r1 - r0) / max(r0, 1.0 / window_s)
