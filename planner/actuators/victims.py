"""Which replicas a scale-down removes: the least loaded, ties to the newest (pure; no I/O, no clock).

A replica's load is the best lower bound known for its requests in flight: the larger of the router's
outstanding count for it (requests the router forwarded and has not seen end) and the engine's own
in-system gauges (requests from anyone, queued or running). Either may be unknown (the router or the
engine does not answer); a replica with no known load goes after every replica whose load is known, since
removing it may cut more work than removing one known to be idle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Candidate(Generic[T]):
    item: T
    age_rank: float  # larger = newer (a launch time, a creation timestamp: anything that orders by age)
    via_router: float | None = None  # the router's outstanding count for it; None: unknown
    on_engine: float | None = None  # the engine's in-system gauges; None: unknown

    @property
    def load(self) -> float | None:
        known = [n for n in (self.via_router, self.on_engine) if n is not None and math.isfinite(n)]
        return max(known) if known else None


def least_loaded(candidates: Sequence[Candidate[T]], count: int) -> list[T]:
    """The ``count`` candidates to remove, in removal order: least load first, newest first among equals,
    unknown load last."""
    def key(c: Candidate[T]) -> tuple[bool, float, float]:
        load = c.load
        return (load is None, load if load is not None else 0.0, -c.age_rank)

    return [c.item for c in sorted(candidates, key=key)[:max(0, count)]]
