"""Quantiles from a kernel's own rolling-origin errors at the requested horizon.

The residuals are scaled by the forecast (``(y - f) / f``): load errors grow with load (a Poisson count's
spread grows as its square root, a daily peak moves more than a night trough), so a relative error
learnt at night transfers to the peak better than an absolute one. Only the most recent ``window``
residuals are used, so the band follows the current regime.
"""

from __future__ import annotations

import math

import numpy as np

from planner.types import QUANTILES, Forecast

# An hour of 30 s ticks. 288 (2.4 hours) mixed a diurnal ramp's errors into the next phase's band: on the
# suite's servegen-day the 0.75 quantile stood above the next 150 s's peak on 92 % of the ticks (85 % at
# 120), and five seeds spent 2.0 % more GPU-hours at the same attainment; the hour-long scenarios never
# hold more than 140 origins, so they are the same. At 60 a heavy-tailed hour's band narrowed on its own
# start and lost seeds (README, "The forecast band's memory").
RESIDUAL_WINDOW = 120
MIN_RESIDUALS = 8
# z-scores of the normal distribution for the shipped quantiles (used while residuals are too few).
_Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.95: 1.6448536269514722, 0.99: 2.3263478740408408}


def residuals(y: np.ndarray, f: np.ndarray, h: int, window: int = RESIDUAL_WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """(forecast, actual) pairs of the last ``window`` origins whose target is already observed."""
    n = len(y)
    if n <= h:
        return np.empty(0), np.empty(0)
    fc, actual = f[: n - h], y[h:]
    ok = np.isfinite(fc)
    fc, actual = fc[ok][-window:], actual[ok][-window:]
    return fc, actual


def quantiles_from_residuals(y: np.ndarray, f: np.ndarray, h: int, point: float,
                             window: int = RESIDUAL_WINDOW) -> dict[float, float]:
    point = max(0.0, point)
    fc, actual = residuals(y, f, h, window)
    if len(fc) >= MIN_RESIDUALS:
        floor = max(1e-9, 0.05 * float(np.mean(np.abs(actual))))
        rel = (actual - fc) / np.maximum(fc, floor)
        qs = np.quantile(rel, QUANTILES)
        # Errors are scaled back by the same max(forecast, floor) they were divided by: a point of 0 between
        # on/off bursts keeps the band of what followed earlier zeros (the next burst) instead of collapsing
        # to 0 with it. The band never exceeds twice the point or the largest value seen: one surprise from
        # a low base (30x relative error) must not forecast 30x a level the series has never reached.
        scale = max(point, floor)
        cap = max(2.0 * point, float(np.max(actual)))
        out = [min(point + float(q) * scale, max(point, cap)) for q in qs]
    else:
        # Too few errors to count: a random-walk band from the step-to-step spread, widening as sqrt(h).
        spread = float(np.std(np.diff(y))) * math.sqrt(h) if len(y) >= 3 else 0.0
        out = [point + _Z[q] * spread for q in QUANTILES]
    clipped = np.maximum.accumulate(np.maximum(np.asarray(out), 0.0))
    return {q: float(v) for q, v in zip(QUANTILES, clipped, strict=True)}


def forecast_from_kernel(y: np.ndarray, f: np.ndarray, h: int, horizon_s: float, model: str,
                         reason: str = "") -> Forecast:
    point = float(f[-1])
    if not math.isfinite(point):
        point, reason = float(y[-1]), (reason + "; " if reason else "") + "kernel undefined; last value"
    point = max(0.0, point)
    return Forecast(mean=point, quantiles=quantiles_from_residuals(y, f, h, point), horizon_s=horizon_s,
                    model=model, reason=reason)
