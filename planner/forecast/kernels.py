"""Cheap forecasting kernels evaluated at every origin at once.

A kernel maps a regular series ``y`` and a horizon of ``h`` steps to ``f`` with ``f[t]`` = the forecast of
``y[t + h]`` made from ``y[:t + 1]`` only (NaN where the kernel cannot forecast yet). One pass gives the
forecast from the last origin *and* the whole rolling-origin backtest, so residual quantiles and the
``auto`` model choice cost one O(n) pass per candidate instead of one fit per origin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

Kernel = Callable[[np.ndarray, int], np.ndarray]


def last_value(y: np.ndarray, h: int) -> np.ndarray:
    return y.astype(np.float64, copy=True)


def moving_average(y: np.ndarray, h: int, window: int) -> np.ndarray:
    """Trailing mean of the last ``window`` points (expanding mean before there are that many)."""
    c = np.concatenate([[0.0], np.cumsum(y)])
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def ewma(y: np.ndarray, h: int, alpha: float) -> np.ndarray:
    """Exponentially weighted level, started at ``y[0]``: a flat forecast at every horizon.

    A plain loop over Python floats: a few hundred microseconds for a day of 30 s steps, and no
    scipy.signal import (which costs more than a second on a cold start).
    """
    keep = 1.0 - alpha
    level = float(y[0])
    out = []
    for obs in y.tolist():
        level = alpha * obs + keep * level
        out.append(level)
    return np.asarray(out)


def holt_damped(y: np.ndarray, h: int, alpha: float, beta: float, phi: float) -> np.ndarray:
    """Damped-trend Holt: level + (phi + ... + phi^h) * trend. Damping keeps a trend from running away."""
    damp = sum(phi**k for k in range(1, h + 1))
    level, trend = float(y[0]), 0.0
    out = np.empty(len(y))
    out[0] = level
    for i, obs in enumerate(y[1:].tolist(), start=1):
        prev = level
        level = alpha * obs + (1.0 - alpha) * (prev + phi * trend)
        trend = beta * (level - prev) + (1.0 - beta) * phi * trend
        out[i] = level + damp * trend
    return out


def seasonal_naive(y: np.ndarray, h: int, period: int) -> np.ndarray:
    """The value one season before the target: ``y[t + h - k*period]`` with the smallest k that is known."""
    k = -(-h // period)
    lag = k * period - h
    out = np.full(len(y), np.nan)
    if lag < len(y):
        out[lag:] = y[: len(y) - lag]
    return out


def seasonal_delta(y: np.ndarray, h: int, period: int, seasons: int, alpha: float) -> np.ndarray:
    """Current level plus the change the last ``seasons`` seasons showed over the same h steps.

    ``f[t] = L[t] + mean_k (y[t + h - k*P] - L[t - k*P])`` with ``L`` an EWMA level. Seasonal naive copies
    yesterday's *level*, which is wrong whenever today is busier than yesterday; this copies only how far
    the target's seasonal twin stood above the level of its day (the ramp into the peak) onto today's
    level. Measuring the offset against the (lagging) level at the same phase cancels the EWMA lag exactly
    on a periodic series.
    Needs ``h <= P`` so the target's seasonal twin is already observed.
    """
    n = len(y)
    level = ewma(y, h, alpha)
    out = np.full(n, np.nan)
    if h > period:
        return out
    acc = np.zeros(n)
    count = np.zeros(n)
    for k in range(1, seasons + 1):
        back = k * period
        if back >= n:
            break
        delta = np.full(n, np.nan)
        # delta[t] = y[t + h - back] - level[t - back], defined for t >= back
        delta[back:] = y[h: n - back + h] - level[: n - back]
        ok = np.isfinite(delta)
        acc[ok] += delta[ok]
        count[ok] += 1
    have = count > 0
    out[have] = level[have] + acc[have] / count[have]
    return out


@dataclass(frozen=True)
class Candidate:
    """A kernel with its parameters bound, and a stable label for logs and the Forecast's ``model``."""

    label: str
    kernel: Kernel = field(compare=False)
    min_points: int = 2

    def run(self, y: np.ndarray, h: int) -> np.ndarray:
        return self.kernel(y, h)


def lv() -> Candidate:
    return Candidate("last-value", last_value, 1)


def ma(window: int) -> Candidate:
    return Candidate(f"moving-average(w={window})", lambda y, h: moving_average(y, h, window), 2)


def ew(alpha: float) -> Candidate:
    return Candidate(f"ewma(a={alpha:g})", lambda y, h: ewma(y, h, alpha), 2)


def holt(alpha: float, beta: float, phi: float) -> Candidate:
    return Candidate(f"holt(a={alpha:g},b={beta:g},phi={phi:g})",
                     lambda y, h: holt_damped(y, h, alpha, beta, phi), 4)


def snaive(period: int, name: str) -> Candidate:
    return Candidate(f"seasonal-naive-{name}(P={period})", lambda y, h: seasonal_naive(y, h, period), period + 1)


def sdelta(period: int, name: str, seasons: int, alpha: float) -> Candidate:
    return Candidate(f"seasonal-delta-{name}(P={period},k={seasons},a={alpha:g})",
                     lambda y, h: seasonal_delta(y, h, period, seasons, alpha), period + 1)


def half_blend(c: Candidate) -> Candidate:
    """Half last value, half ``c``: by convexity of the absolute error, it loses at most half what ``c`` loses."""
    return Candidate(f"blend({c.label})", lambda y, h: 0.5 * (y + c.kernel(y, h)), c.min_points)
