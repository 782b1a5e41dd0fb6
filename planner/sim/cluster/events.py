"""The simulator's event queue: a heap of ``(time, insertion number, handler, replica, version)``.

Events at the same time run in insertion order (the unique number breaks the tie, so handlers are never
compared), which makes a run deterministic. A handler is called as ``handler(replica, version, now_s)`` and ignores the event
when the replica's version has moved on since it was planned (see :mod:`planner.sim.cluster.replicas`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

Handler = Callable[[Any, int, float], None]


class EventQueue:
    __slots__ = ("heap", "counter")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Handler, Any, int]] = []
        self.counter = itertools.count()  # hot paths push inline: heappush(heap, (t, next(counter), ...))

    def push(self, at_s: float, handler: Handler, replica: Any, version: int) -> None:
        heapq.heappush(self.heap, (at_s, next(self.counter), handler, replica, version))
