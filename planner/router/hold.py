"""Requests that arrive while a pool the route needs has no replica in rotation (a policy at zero, or one
whose last replica is being replaced) wait here instead of failing: Knative's activator, in the router.

- The queue is bounded (``max_held``) and so is each request's wait (``timeout_s``); past either the request
  gets 503 with ``Retry-After`` and is counted (``planner_router_hold_refused_total{why}``), never dropped.
- Held requests are released in arrival order as soon as every pool the mode needs has a replica in
  rotation (the targets.json refresh, ``release``): each resumes in that order and picks its replica before
  the next one resumes, so the first to come is the first sent.
- The first request held while none waited signals demand (``wake``: the controller's ``POST /v1/wake``),
  so the controller wakes the policy at once instead of at its next tick; the signal is repeated every
  ``WAKE_REPEAT_S`` while requests still wait, in case one was lost or the controller held.

Only the router's event loop touches this state: no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from planner.router.defaults import RETRY_AFTER_S, WAKE_REPEAT_S
from planner.telemetry import RouterMetrics

log = logging.getLogger("planner.router")


@dataclass(frozen=True)
class Refused:
    """Why a held request gets 503: ``queue_full`` or ``timeout``."""

    why: str
    message: str
    retry_after_s: int = RETRY_AFTER_S


class Holding:
    def __init__(self, pools: Sequence[str], in_rotation: Callable[[str], int], metrics: RouterMetrics, *,
                 max_held: int, timeout_s: float, wake: Callable[[int], Coroutine[Any, Any, None]] | None = None) -> None:
        self.pools = tuple(pools)
        self.in_rotation = in_rotation
        self.metrics = metrics
        self.max_held = max_held
        self.timeout_s = timeout_s
        self.wake = wake
        self.waiters: deque[asyncio.Future[None]] = deque()
        self._last_wake_s = -float("inf")
        self._wake_task: asyncio.Task[None] | None = None
        metrics.held.set(0)

    def ready(self) -> bool:
        return all(self.in_rotation(p) > 0 for p in self.pools)

    @property
    def held(self) -> int:
        return len(self.waiters)

    async def admit(self) -> Refused | None:
        """Wait until every pool has a replica in rotation; None to go on, or why the request is refused."""
        if not self.waiters and self.ready():
            return None
        if len(self.waiters) >= self.max_held:
            return self._refuse("queue_full", f"no replica in rotation for {'+'.join(self.pools)} and "
                                              f"{len(self.waiters)} requests already wait (--hold-queue "
                                              f"{self.max_held})")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        self.metrics.held_requests.inc()
        self.metrics.held.set(len(self.waiters))
        started = time.monotonic()
        self._signal()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            return self._refuse("timeout", f"no replica in rotation for {'+'.join(self.pools)} within "
                                           f"--hold-timeout-s {self.timeout_s:g}")
        finally:
            if waiter in self.waiters:  # timed out, or the client went away: not released, leave the queue
                self.waiters.remove(waiter)
            waiter.cancel()
            self.metrics.held.set(len(self.waiters))
        self.metrics.hold_seconds.observe(time.monotonic() - started)
        return None

    def release(self) -> int:
        """Release every held request, oldest first, when every pool has a replica; returns how many."""
        if not self.waiters:
            return 0
        if not self.ready():
            self._signal()  # still waiting: repeat the wake signal now and then
            return 0
        n = 0
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # resumed in this order by the event loop (callbacks run FIFO)
                n += 1
        self.metrics.held.set(0)
        return n

    def _refuse(self, why: str, message: str) -> Refused:
        self.metrics.hold_refused.labels(why=why).inc()
        return Refused(why, message)

    def _signal(self) -> None:
        """Ask the controller to wake the policy: on the first request held, then every WAKE_REPEAT_S."""
        if self.wake is None or (self._wake_task is not None and not self._wake_task.done()):
            return
        now = time.monotonic()
        if now - self._last_wake_s < WAKE_REPEAT_S:
            return
        self._last_wake_s = now
        self._wake_task = asyncio.get_running_loop().create_task(self.wake(len(self.waiters)))
