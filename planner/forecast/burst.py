"""How bursty the arrival rate is: its coefficient of variation beyond what Poisson counting explains. PURE.

A rate read over a ``window_s`` window from Poisson arrivals at a true, constant rate r varies by r/window_s
(its variance) from counting alone: 3 % of a 33 req/s rate over 60 s, 13 % of 1 req/s. That noise says
nothing about how the load moves, so it is taken out before the coefficient of variation is formed:

    cv = sqrt(max(0, var(rates) - mean(rates) / window_s)) / mean(rates)

Over 10 minutes it sets the suite's steady scenarios far apart from Azure code, whose load is on/off from one
minute to the next (README, "Scale-down rules for steady traffic, and one seed's luck", has the medians;
``planner bench seeds`` prints them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_SAMPLES = 4  # fewer windows than this say nothing about a spread


def rate_cv(times_s: Sequence[float], rates_rps: Sequence[float], now_s: float, over_s: float,
            window_s: float) -> float | None:
    """The excess coefficient of variation of the rates observed in (now_s - over_s, now_s].

    None (unknown) when the history covers less than half of ``over_s`` or has fewer than MIN_SAMPLES finite
    readings: a burst the history has not yet shown must not be ruled out. 0.0 when every reading is zero.
    """
    if window_s <= 0 or over_s <= 0:
        raise ValueError(f"window_s and over_s must be > 0, got {window_s!r} and {over_s!r}")
    since = now_s - over_s
    kept = [(t, r) for t, r in zip(times_s, rates_rps, strict=True)
            if t > since and t <= now_s and math.isfinite(r) and r >= 0]
    if len(kept) < MIN_SAMPLES or now_s - kept[0][0] < over_s / 2:
        return None
    values = [r for _, r in kept]
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / len(values)
    excess = max(0.0, var - mean / window_s)
    return math.sqrt(excess) / mean
