"""Forecasters built on one kernel: moving average, EWMA, damped Holt, seasonal naive, seasonal delta."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.forecast import kernels as k
from planner.forecast.base import no_forecast
from planner.forecast.empirical import forecast_from_kernel
from planner.forecast.history import NoHistory, Series, prepare
from planner.types import Forecast

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S


def no_history_forecast(h: NoHistory, horizon_s: float, model: str) -> Forecast:
    return no_forecast(horizon_s, model, h.reason, h.fallback)


@dataclass(frozen=True)
class KernelFitted:
    """Fitted result of a single-kernel forecaster: the prepared series and the kernel to run on it."""

    name: str
    history: Series | NoHistory
    candidate: k.Candidate | None  # None: pick by period at forecast time (seasonal forecasters)
    period_s: float = 0.0
    seasons: int = 1

    def forecast(self, horizon_s: float) -> Forecast:
        if not math.isfinite(horizon_s) or horizon_s < 0:
            return no_forecast(horizon_s, self.name, f"horizon_s must be finite and >= 0, got {horizon_s!r}")
        if isinstance(self.history, NoHistory):
            return no_history_forecast(self.history, horizon_s, self.name)
        s = self.history
        h = s.steps(horizon_s)
        cand = self.candidate
        if cand is None:
            cand, why = seasonal_candidate(self.name, s, h, self.period_s, self.seasons)
            if why:
                f = k.last_value(s.values, h)
                return forecast_from_kernel(s.values, f, h, horizon_s, self.name, f"{why}; last-value fallback")
        assert cand is not None
        if len(s.values) < cand.min_points:
            f = k.last_value(s.values, h)
            return forecast_from_kernel(s.values, f, h, horizon_s, self.name,
                                        f"{len(s.values)} points < {cand.min_points} needed; last-value fallback")
        return forecast_from_kernel(s.values, cand.run(s.values, h), h, horizon_s, self.name)


def seasonal_candidate(name: str, s: Series, h: int, period_s: float, seasons: int) -> tuple[k.Candidate | None, str]:
    period = round(period_s / s.step_s)
    label = "daily" if period_s == DAY_S else "weekly" if period_s == WEEK_S else f"{period_s:g}s"
    if period < 2:
        return None, f"season of {period_s:g} s is under two steps of {s.step_s:g} s"
    if len(s.values) <= period + h:
        return None, (f"history of {len(s.values)} steps is shorter than one {label} season "
                      f"({period} steps) plus the horizon")
    if name.startswith("seasonal-delta"):
        if h > period:
            return None, f"horizon of {h} steps is longer than the season ({period} steps)"
        return k.sdelta(period, label, seasons, 0.5), ""
    return k.snaive(period, label), ""


class KernelForecaster:
    """One kernel with fixed parameters (no estimation): cheap and fully deterministic."""

    def __init__(self, name: str, candidate: k.Candidate | None, period_s: float = 0.0, seasons: int = 1) -> None:
        self.name = name
        self._candidate = candidate
        self._period_s = period_s
        self._seasons = seasons

    def fit(self, times_s: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> KernelFitted:
        return KernelFitted(self.name, prepare(times_s, values), self._candidate, self._period_s, self._seasons)


def moving_average(window: int = 6) -> KernelForecaster:
    return KernelForecaster("moving-average", k.ma(int(window)))


def ewma(alpha: float = 0.3) -> KernelForecaster:
    return KernelForecaster("ewma", k.ew(float(alpha)))


def holt(alpha: float = 0.5, beta: float = 0.1, phi: float = 0.98) -> KernelForecaster:
    return KernelForecaster("holt", k.holt(float(alpha), float(beta), float(phi)))


def seasonal_naive_daily() -> KernelForecaster:
    return KernelForecaster("seasonal-naive-daily", None, DAY_S)


def seasonal_naive_weekly() -> KernelForecaster:
    return KernelForecaster("seasonal-naive-weekly", None, WEEK_S)


def seasonal_delta_daily(seasons: int = 3) -> KernelForecaster:
    return KernelForecaster("seasonal-delta-daily", None, DAY_S, int(seasons))
