from __future__ import annotations


class FakeClock:
    """A clock that only moves when told to: minutes pass in microseconds in tests."""

    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self._now_s = float(start_s)

    def now_s(self) -> float:
        return self._now_s

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("FakeClock cannot go backwards")
        self._now_s += seconds
        return self._now_s
