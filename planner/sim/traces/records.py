"""Request traces as records: the requests themselves, aggregate rate windows, and token-length distributions.

A trace is three sorted-by-arrival numpy arrays (arrival seconds from the trace start, ISL, OSL) plus a
note of where it came from and how it was scaled, because a replay that scaled the load must say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RequestTrace:
    arrival_s: np.ndarray  # float64, seconds from the trace start, sorted
    isl: np.ndarray  # int64
    osl: np.ndarray  # int64
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.isl) != n or len(self.osl) != n:
            raise ValueError("arrival_s, isl and osl must have the same length")

    def __len__(self) -> int:
        return int(len(self.arrival_s))

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def window(self, start_s: float, end_s: float) -> RequestTrace:
        """Requests arriving in [start_s, end_s), times kept as they are."""
        lo, hi = np.searchsorted(self.arrival_s, [start_s, end_s], side="left")
        return RequestTrace(self.arrival_s[lo:hi], self.isl[lo:hi], self.osl[lo:hi], self.source, self.notes)

    def summary(self) -> dict[str, float | int | str | None]:
        n = len(self)
        dur = self.duration_s
        return {
            "source": self.source,
            "notes": self.notes,
            "requests": n,
            "duration_s": round(dur, 3),
            "mean_rate_rps": round(n / dur, 4) if dur > 0 else 0.0,
            "isl_mean": round(float(self.isl.mean()), 2) if n else 0.0,
            "osl_mean": round(float(self.osl.mean()), 2) if n else 0.0,
            "isl_p99": int(np.percentile(self.isl, 99)) if n else 0,
            "osl_p99": int(np.percentile(self.osl, 99)) if n else 0,
            "arrival_dispersion_1s": arrival_dispersion(self.arrival_s),
        }


# Per-second counts tell queueing apart from Poisson at the scale of a prompt's service (tenths of a second to
# seconds); a minute is long enough for a steady spread and short enough that a rate that moves over minutes
# (waves, steps, the day) does not count as burstiness.
DISPERSION_BIN_S, DISPERSION_WINDOW_S = 1.0, 60.0
MIN_WINDOW_ARRIVALS = 20  # a minute with fewer arrivals says little about a variance


def arrival_dispersion(arrival_s: np.ndarray, bin_s: float = DISPERSION_BIN_S,
                       window_s: float = DISPERSION_WINDOW_S) -> float | None:
    """The median over ``window_s`` windows of the index of dispersion (variance / mean) of the arrivals
    counted per ``bin_s``: 1 for Poisson arrivals, which the prefill sizing's M/G/c queue assumes; above 1 the
    arrivals come in clumps and a pool sized from the mean rate queues more than predicted (Azure 2023's code
    trace: about 8). None when no window holds MIN_WINDOW_ARRIVALS."""
    if len(arrival_s) == 0 or bin_s <= 0 or window_s < 2 * bin_s:
        return None
    per_window = int(window_s // bin_s)
    counts = np.bincount(np.floor((arrival_s - arrival_s[0]) / bin_s).astype(np.int64))
    whole = len(counts) // per_window * per_window
    if whole == 0:
        return None
    grid = counts[:whole].reshape(-1, per_window).astype(np.float64)
    busy = grid[grid.sum(axis=1) >= MIN_WINDOW_ARRIVALS]
    if len(busy) == 0:
        return None
    return round(float(np.median(busy.var(axis=1, ddof=1) / busy.mean(axis=1))), 3)


@dataclass(frozen=True)
class RateWindows:
    window_start_s: np.ndarray
    window_s: np.ndarray
    rate_rps: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return int(len(self.window_start_s))


@dataclass(frozen=True)
class LengthDist:
    """Token-length distribution: ``fixed`` (mean), ``lognormal`` (mean, cv) or ``empirical`` (values)."""

    kind: str = "lognormal"
    mean: float = 1000.0
    cv: float = 1.0
    values: tuple[int, ...] = field(default=())
    minimum: int = 1
    maximum: int = 1 << 20

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            out = np.full(n, self.mean)
        elif self.kind == "lognormal":
            sigma2 = math.log1p(self.cv**2)
            mu = math.log(max(self.mean, 1e-9)) - sigma2 / 2
            out = rng.lognormal(mu, math.sqrt(sigma2), n)
        elif self.kind == "empirical":
            if not self.values:
                raise ValueError("empirical LengthDist needs values")
            out = rng.choice(np.asarray(self.values), n)
        else:
            raise ValueError(f"unknown LengthDist kind {self.kind!r}; allowed: fixed, lognormal, empirical")
        return np.clip(np.rint(out), self.minimum, self.maximum).astype(np.int64)
