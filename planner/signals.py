"""Missing-signal detection (pure: time comes in as ``now_s``).

The failure mode this exists for: the planner keeps running while an input it depends on has silently
gone away (a relabelling change dropped the role label, an engine upgrade renamed a metric), and it holds
the last size forever with nobody noticing. Each signal remembers when it was last good; absent for
``stale_after_intervals`` control intervals it is *missing*: exported, readiness goes degraded, and the
change is reported once (the caller logs ``changes``, not every tick).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from planner.types import NoData, Observation

# Per pool: only what that pool's sizing uses. Prefill is sized from its arrival rate, prompt length and
# TTFT; decode from output length, ITL and what runs (running requests / KV, present whenever the pool is:
# the source refuses a pool without its running gauge); an aggregated pool from all of them. A prefill
# engine of the usual P/D setup serves max_tokens=1 and exports no ITL, so asking prefill for ITL would keep
# readiness down for good. Latencies and token means are *good* when measured or when there was nothing to
# measure (zero requests): "no traffic" is not a missing signal.
POOL_SIGNALS = ("rate", "isl", "osl", "ttft", "itl", "running")
SIGNALS_BY_POOL: dict[str, tuple[str, ...]] = {
    "prefill": ("rate", "isl", "ttft"),
    "decode": ("rate", "osl", "itl", "running"),
    "aggregated": POOL_SIGNALS,
}


def signal_name(pool: str, signal: str) -> str:
    return f"{pool}/{signal}"


def pool_signals(pool: str) -> tuple[str, ...]:
    return SIGNALS_BY_POOL.get(str(pool), POOL_SIGNALS)


def required_signals(pools: Iterable[str]) -> tuple[str, ...]:
    return tuple(signal_name(p, s) for p in pools for s in pool_signals(p))


def signals_present(observation: Observation | NoData, pools: Iterable[str]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for pool in pools:
        obs = observation.pools.get(pool) if isinstance(observation, Observation) else None
        idle = obs is not None and obs.requests == 0
        values = {
            "rate": obs is not None,
            "isl": obs is not None and (obs.isl_mean is not None or idle),
            "osl": obs is not None and (obs.osl_mean is not None or idle),
            "ttft": obs is not None and (obs.ttft_ms_p95 is not None or idle),
            "itl": obs is not None and (obs.itl_ms_p95 is not None or idle),
            "running": obs is not None,
        }
        out.update({signal_name(pool, k): values[k] for k in pool_signals(pool)})
    return out


@dataclass(frozen=True)
class SignalChange:
    signal: str
    missing: bool  # the new state
    at_s: float
    seconds_since_good: float | None  # None: never good since tracking began


@dataclass(frozen=True)
class SignalStatus:
    at_s: float
    seconds_since_good: Mapping[str, float | None]
    missing: frozenset[str]

    @property
    def ready(self) -> bool:
        return not self.missing


class SignalTracker:
    def __init__(self, signals: Sequence[str], interval_s: float, stale_after_intervals: int) -> None:
        if interval_s <= 0 or stale_after_intervals < 1:
            raise ValueError("interval_s must be > 0 and stale_after_intervals >= 1")
        self.signals = tuple(signals)
        self.stale_after_s = interval_s * stale_after_intervals
        self._started_s: float | None = None
        self._last_good_s: dict[str, float | None] = {s: None for s in self.signals}
        self._missing: set[str] = set()

    def _age(self, signal: str, now_s: float) -> float | None:
        last = self._last_good_s[signal]
        return None if last is None else max(0.0, now_s - last)

    def update(self, present: Mapping[str, bool], now_s: float) -> list[SignalChange]:
        """Record one read; return the signals whose missing/ok state changed (log these, once each)."""
        if self._started_s is None:
            self._started_s = now_s
        changes = []
        for s in self.signals:
            if present.get(s, False):
                self._last_good_s[s] = now_s
            since = self._last_good_s[s]
            reference = since if since is not None else self._started_s
            missing = now_s - reference >= self.stale_after_s
            if missing != (s in self._missing):
                (self._missing.add if missing else self._missing.discard)(s)
                changes.append(SignalChange(s, missing, now_s, self._age(s, now_s)))
        return changes

    def status(self, now_s: float) -> SignalStatus:
        return SignalStatus(now_s, {s: self._age(s, now_s) for s in self.signals}, frozenset(self._missing))


def log_changes(changes: Iterable[SignalChange], logger: logging.Logger, policy: str) -> None:
    for c in changes:
        if c.missing:
            age = "never seen" if c.seconds_since_good is None else f"last good {c.seconds_since_good:.0f}s ago"
            logger.warning("policy %s: signal %s missing (%s); readiness degraded", policy, c.signal, age)
        else:
            logger.info("policy %s: signal %s is back", policy, c.signal)
