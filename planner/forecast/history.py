"""History preparation: irregular, holey samples -> one regular grid, or an explicit reason why not.

Every forecaster goes through :func:`prepare`, so the edge cases are decided once, here:

- non-finite values (NaN, inf) and negative values are dropped: a rate or a token mean cannot be negative,
  so a negative sample is a broken reading, not data;
- samples are sorted by time; for duplicate timestamps the last sample wins (a re-read replaces a read);
- the step is the median of the spacings near the smallest one; a missing step inside the history is
  filled by linear interpolation between its neighbours (``Series.filled`` counts them);
- a gap longer than ``MAX_GAP_STEPS`` breaks the history: only the segment after it is used, because
  interpolating across an outage invents a ramp that never happened;
- leading zeros are dropped: a series that starts with zeros usually started before the traffic did
  (a new deployment), and those zeros would drag every level estimate down. Zeros after the first
  non-zero value are data (idle minutes) and are kept.

Outcomes that leave nothing to forecast from come back as a :class:`NoHistory` with a reason and the
best fallback value (the last finite value, NaN when there is none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_GAP_STEPS = 10


@dataclass(frozen=True)
class Series:
    """Values on a regular grid: ``values[i]`` was observed at ``t0_s + i * step_s``."""

    t0_s: float
    step_s: float
    values: np.ndarray
    filled: int = 0  # steps filled by interpolation
    dropped: int = 0  # non-finite / negative samples dropped

    @property
    def last_s(self) -> float:
        return self.t0_s + (len(self.values) - 1) * self.step_s

    def time_of(self, index: int) -> float:
        return self.t0_s + index * self.step_s

    def steps(self, horizon_s: float) -> int:
        """Whole steps covering ``horizon_s`` (rounded up: the forecast must reach the horizon)."""
        return max(1, math.ceil(horizon_s / self.step_s - 1e-9))


@dataclass(frozen=True)
class NoHistory:
    reason: str
    fallback: float = math.nan


def _step(diffs: np.ndarray) -> float:
    """The sampling step: the median of the spacings near the smallest one.

    A plain median is wrong when gaps are common (0, 60, 180 has median spacing 90); spacings of more
    than 1.5 smallest ones are gaps, not the step, while jitter around the step is kept.
    """
    return float(np.median(diffs[diffs < 1.5 * diffs.min()]))


def prepare(times_s: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> Series | NoHistory:
    t = np.asarray(times_s, dtype=np.float64).ravel()
    v = np.asarray(values, dtype=np.float64).ravel()
    if len(t) != len(v):
        raise ValueError(f"times_s has {len(t)} entries but values has {len(v)}")
    if len(v) == 0:
        return NoHistory("empty history")
    keep = np.isfinite(t) & np.isfinite(v) & (v >= 0)
    dropped = int(len(v) - keep.sum())
    if not keep.any():
        return NoHistory(f"no usable values ({len(v)} samples, all NaN, infinite or negative)")
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    # duplicate timestamps: keep the last sample of each
    last_of_run = np.append(t[1:] != t[:-1], True)
    t, v = t[last_of_run], v[last_of_run]
    fallback = float(v[-1])
    nonzero = np.flatnonzero(v > 0)
    if len(nonzero) == 0:
        return NoHistory(f"all-zero history ({len(v)} samples)", 0.0)
    t, v = t[nonzero[0]:], v[nonzero[0]:]
    if len(v) == 1:
        return NoHistory("single-point history", fallback)
    diffs = np.diff(t)
    step = _step(diffs)
    # An outage splits the history; keep what follows the last long gap.
    breaks = np.flatnonzero(diffs > MAX_GAP_STEPS * step)
    if len(breaks):
        t, v = t[breaks[-1] + 1:], v[breaks[-1] + 1:]
        if len(v) == 1:
            return NoHistory(f"single point after a gap of more than {MAX_GAP_STEPS} steps", fallback)
        step = _step(np.diff(t))
    idx = np.rint((t - t[0]) / step).astype(np.int64)
    # Two samples rounding onto one grid slot: the later one wins (same rule as duplicates).
    n = int(idx[-1]) + 1
    grid = np.full(n, np.nan)
    grid[idx] = v
    holes = np.isnan(grid)
    filled = int(holes.sum())
    if filled:
        pos = np.arange(n)
        grid[holes] = np.interp(pos[holes], pos[~holes], grid[~holes])
    return Series(float(t[0]), step, grid, filled, dropped)
