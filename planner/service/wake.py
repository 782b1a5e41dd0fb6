"""The router's wake signal as a control loop sees it (``POST /v1/wake``, sent by `planner route` when it holds a
request for a policy with no replica in rotation; Knative's activator is the model).

- ``WakeSignal`` keeps the requests the router says it holds until the next read takes them: they become the
  observation's ``waiting`` (decide() wakes a policy at zero on them: the engines' metrics cannot show them,
  there is no engine), and an event that cuts the wait for the next grid point short, so the loop ticks at
  once instead of up to ``interval_s`` later.
- ``pause`` is that wait: for the grid point, or until the event is set (then the loop ticks off the grid and
  keeps its grid).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from planner.clock import Clock
from planner.types import NoData, Observation

POLL_S = 0.1  # how often a wait looks at the wake event (and at stop, through ``wait``)


class WakeSignal:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = 0
        self.event = threading.Event()  # set by the API: tick now

    def note(self, waiting: int) -> None:
        with self._lock:
            self._waiting = max(self._waiting, waiting)

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


def pause(wait: Callable[[float], object], clock: Clock, due_s: float, stop: threading.Event,
          woken: threading.Event | None) -> None:
    """Wait until ``due_s`` (clock time) or until ``woken`` is set (cleared here: the caller ticks now)."""
    if woken is None:
        wait(max(0.0, due_s - clock.now_s()))
        return
    while not stop.is_set():
        if woken.is_set():
            woken.clear()
            return
        left = due_s - clock.now_s()
        if left <= 0:
            return
        wait(min(left, POLL_S))
