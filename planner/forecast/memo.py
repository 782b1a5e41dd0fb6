"""Deterministic per-forecaster memo for expensive choices (model order, parameters, ``auto``'s pick).

The controller calls ``fit`` every tick with a history that slides by one step, so an expensive choice is
made at an *anchor*: the last grid point at or before a multiple of ``every_steps * step_s`` in data time.
The memo key is (horizon steps, step, anchor time, fingerprint of the last ``FINGERPRINT_POINTS`` values up
to the anchor). Between anchors every tick reuses the choice; the next anchor re-makes it. Because the
key is built from the input only (never from a clock or a call counter), calling ``fit`` twice with the
same history gives the same forecast, and a replay gives the same results as the live run.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

from planner.forecast.history import Series

FINGERPRINT_POINTS = 64
T = TypeVar("T")


def anchor_index(series: Series, every_steps: int) -> int:
    """Index of the current anchor: the last multiple of ``every_steps`` steps in data time.

    While the history is short (the anchor would leave less than half of it), the period halves until it
    does not: a young series gets re-estimated at roughly doubling lengths (amortised O(1) estimates per
    tick) instead of being stuck with an estimate made from its first few points.
    """
    n = len(series.values)
    every = max(1, every_steps)
    while True:
        period_s = every * series.step_s
        anchor_s = math.floor(series.last_s / period_s + 1e-9) * period_s
        a = int(min(n - 1, max(0, math.floor((anchor_s - series.t0_s) / series.step_s + 1e-9))))
        if every == 1 or 2 * (a + 1) >= n:
            return a
        every //= 2


def memo_key(series: Series, anchor: int, *extra: Hashable) -> tuple[Hashable, ...]:
    tail = np.ascontiguousarray(series.values[max(0, anchor + 1 - FINGERPRINT_POINTS): anchor + 1])
    digest = hashlib.blake2b(tail.tobytes(), digest_size=16).hexdigest()
    return (*extra, round(series.step_s, 6), round(series.time_of(anchor), 6), digest)


class BoundedMemo(Generic[T]):
    """A small FIFO cache: enough for a few series and horizons, never unbounded."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, T] = OrderedDict()

    def get_or_make(self, key: Hashable, make: Callable[[], T]) -> T:
        if key in self._items:
            return self._items[key]
        value = make()
        self._items[key] = value
        while len(self._items) > self._size:
            self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)
