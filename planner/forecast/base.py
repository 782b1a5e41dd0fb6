"""Forecaster protocol (statsmodels' fit -> results -> forecast shape) and the last-value baseline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from planner.types import QUANTILES, Forecast


class Fitted(Protocol):
    def forecast(self, horizon_s: float) -> Forecast: ...


class Forecaster(Protocol):
    name: str

    def fit(self, times_s: Sequence[float], values: Sequence[float]) -> Fitted: ...


def finite_history(times_s: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    pairs = [(float(t), float(v)) for t, v in zip(times_s, values, strict=True)
             if math.isfinite(float(v)) and math.isfinite(float(t))]
    return [t for t, _ in pairs], [v for _, v in pairs]


def no_forecast(horizon_s: float, model: str, reason: str, fallback: float = math.nan) -> Forecast:
    return Forecast(mean=fallback, quantiles={q: fallback for q in QUANTILES}, horizon_s=horizon_s, model=model,
                    ok=False, reason=reason)


@dataclass(frozen=True)
class _LastValueFitted:
    value: float | None

    def forecast(self, horizon_s: float) -> Forecast:
        if self.value is None:
            return no_forecast(horizon_s, "last-value", "empty history")
        v = max(0.0, self.value)
        return Forecast(mean=v, quantiles={q: v for q in QUANTILES}, horizon_s=horizon_s, model="last-value")


class LastValue:
    name = "last-value"

    def fit(self, times_s: Sequence[float], values: Sequence[float]) -> Fitted:
        _, vs = finite_history(times_s, values)
        return _LastValueFitted(vs[-1] if vs else None)


def make_forecaster(name: str, **options: float) -> Forecaster:
    """Forecaster by name. The forecasting module extends the registry in ``planner.forecast.registry``."""
    try:
        from planner.forecast.registry import REGISTRY
    except ModuleNotFoundError:
        REGISTRY = {}
    if name == "last-value":
        return LastValue()
    if name in REGISTRY:
        return REGISTRY[name](**options)
    raise ValueError(f"unknown forecaster {name!r}; known: {', '.join(['last-value', *sorted(REGISTRY)])}")
