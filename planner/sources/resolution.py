"""How finely a latency histogram's buckets resolve an SLA target (pure: no I/O, no clock).

``histogram_quantile`` knows only how many observations fell into each bucket; inside the bucket it
interpolates linearly. A p95 at the SLA target is therefore read from the bucket that holds the target,
``(lower, upper]``, and may land anywhere in it whatever the true value is: the bracket's width relative
to the target is the error such a read can have. vLLM's ITL buckets put a 40 ms target in (25, 50] ms
(62.5 % of the target), its TTFT buckets put 200 ms in (100, 250] ms (75 %). Where the bracket is wider
than ``RESOLVED_MAX_RATIO`` of the target the quantile cannot say which side of the target the traffic
is on, and the exact ``_sum/_count`` mean is the better signal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

RESOLVED_MAX_RATIO = 0.25  # bracket width / target above which a p95 read near the target is not trusted


@dataclass(frozen=True)
class Resolution:
    """The bucket ``(lower_ms, upper_ms]`` holding ``target_ms``; ``upper_ms`` is inf past the last bound."""

    target_ms: float
    lower_ms: float
    upper_ms: float

    @property
    def ratio(self) -> float:
        """Bracket width over the target: the relative error a p95 read in this bucket can have."""
        return (self.upper_ms - self.lower_ms) / self.target_ms

    @property
    def resolved(self) -> bool:
        return self.ratio <= RESOLVED_MAX_RATIO


def bracket(bounds_s: Iterable[float], target_ms: float) -> Resolution | None:
    """The bucket of a histogram with upper bounds ``bounds_s`` (seconds, ``+Inf`` allowed) that holds
    ``target_ms``; None when there are no bounds (no bucket series: nothing to judge).

    As in ``histogram_quantile``, the first bucket starts at 0 and the ``+Inf`` bucket cannot be
    interpolated (a target past the last finite bound is unresolved: ratio inf). A target exactly on a
    bound belongs to the bucket it closes (``le`` is inclusive).
    """
    if not math.isfinite(target_ms) or target_ms <= 0:
        raise ValueError(f"target_ms must be a finite number > 0, got {target_ms!r}")
    bounds_ms = sorted({b * 1e3 for b in bounds_s if not math.isnan(b)})
    if not bounds_ms:
        return None
    upper = next((b for b in bounds_ms if b >= target_ms), math.inf)
    lower = max((b for b in bounds_ms if b < target_ms), default=0.0)
    return Resolution(target_ms, max(0.0, lower), upper)
