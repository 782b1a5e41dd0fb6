"""The only clock in the planner. Pure code takes ``now_s`` as an argument instead."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_s(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now_s(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))
