"""The router's wake signal as a control loop sees it (``POST /v1/wake``, sent by `planner route` when it holds a
request for a policy with no replica in rotation; Knative's activator is the model).

- ``WakeSignal`` keeps the requests the router says it holds until the next read takes them: they become the
  observation's ``waiting`` (decide() wakes a policy at zero on them: the engines' metrics cannot show them,
  there is no engine), and an event that cuts the wait for the next grid point short, so the loop ticks at
  once instead of up to ``interval_s`` later.
- ``wait_or_wake`` is the wait between ticks: for the grid point, or until the event is set (then the loop
  ticks off the grid and keeps its grid: service/loop.py run_on_grid).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from planner.types import NoData, Observation

POLL_S = 0.1  # how often a wait looks at the wake event


class WakeSignal:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = 0
        self.event = threading.Event()  # set by the API: tick now

    def note(self, waiting: int) -> None:
        with self._lock:
            self._waiting = max(self._waiting, waiting)

    def pending(self) -> int:
        """The requests held at the router since the last read, left for that read to take."""
        with self._lock:
            return self._waiting

    def take(self) -> int:
        """The requests held at the router since the last read (0: no signal), forgotten once taken."""
        with self._lock:
            n, self._waiting = self._waiting, 0
            return n


def with_waiting(observation: Observation | NoData, waiting: int, now_s: float, window_s: float
                 ) -> Observation:
    """The read with the requests held at the router; a read with nothing (no replica, no series) becomes an
    observation of them alone."""
    if isinstance(observation, Observation):
        return replace(observation, waiting=observation.waiting + waiting)
    return Observation(now_s, window_s, {}, waiting=waiting)


def wait_or_wake(stop: threading.Event, woken: threading.Event) -> Callable[[float], None]:
    """The wait between ticks of `planner run`: ``seconds`` of real time, ended early by ``stop`` or by a wake
    (``woken``, cleared here: the loop then ticks at once, off its grid, and keeps the grid)."""

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            if woken.is_set():
                woken.clear()
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            stop.wait(min(left, POLL_S))

    return wait
