"""PURE forecasters: ``Forecaster.fit(times_s, values) -> Fitted``; ``Fitted.forecast(horizon_s) -> Forecast``."""

from planner.forecast.base import Fitted, Forecaster, LastValue
from planner.forecast.registry import make_forecaster, names

__all__ = ["Fitted", "Forecaster", "LastValue", "make_forecaster", "names"]
