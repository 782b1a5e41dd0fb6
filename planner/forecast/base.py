"""Forecaster protocol (statsmodels' fit -> results -> forecast shape) and the last-value baseline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from planner.forecast.empirical import forecast_from_kernel
from planner.forecast.history import NoHistory, Series, prepare
from planner.types import QUANTILES, Forecast


class Fitted(Protocol):
    def forecast(self, horizon_s: float) -> Forecast: ...


# History arrives as lists from the controller and as numpy arrays from evaluation; both are accepted.
History = Sequence[float] | np.ndarray


class Forecaster(Protocol):
    name: str

    def fit(self, times_s: History, values: History) -> Fitted: ...


def finite_history(times_s: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    pairs = [(float(t), float(v)) for t, v in zip(times_s, values, strict=True)
             if math.isfinite(float(v)) and math.isfinite(float(t))]
    return [t for t, _ in pairs], [v for _, v in pairs]


def no_forecast(horizon_s: float, model: str, reason: str, fallback: float = math.nan) -> Forecast:
    return Forecast(mean=fallback, quantiles={q: fallback for q in QUANTILES}, horizon_s=horizon_s, model=model,
                    ok=False, reason=reason)


@dataclass(frozen=True)
class _LastValueFitted:
    history: Series | NoHistory

    def forecast(self, horizon_s: float) -> Forecast:
        if not math.isfinite(horizon_s) or horizon_s < 0:
            return no_forecast(horizon_s, "last-value", f"horizon_s must be finite and >= 0, got {horizon_s!r}")
        if isinstance(self.history, NoHistory):
            return no_forecast(horizon_s, "last-value", self.history.reason, self.history.fallback)
        y = self.history.values
        h = self.history.steps(horizon_s)
        # The band comes from last-value's own h-step errors on this history, so the baseline is judged
        # on the same footing (quantiles included) as every other forecaster.
        return forecast_from_kernel(y, y, h, horizon_s, "last-value")


class LastValue:
    """The baseline: the last usable value, with a band from its own past h-step errors."""

    name = "last-value"

    def fit(self, times_s: History, values: History) -> Fitted:
        return _LastValueFitted(prepare(times_s, values))
