"""Forecaster names -> factories. These names are a contract (policies, CLI ``--models``): add, never rename.

``make_forecaster(name, **options)`` (base.py) looks names up here; options go to the factory.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.forecast import simple
from planner.forecast.auto import Auto
from planner.forecast.base import Forecaster, LastValue
from planner.forecast.heavy import Arima, HoltWinters, KalmanLLT

REGISTRY: dict[str, Callable[..., Forecaster]] = {
    "last-value": lambda **_: LastValue(),
    "moving-average": simple.moving_average,
    "ewma": simple.ewma,
    "holt": simple.holt,
    "seasonal-naive-daily": lambda **_: simple.seasonal_naive_daily(),
    "seasonal-naive-weekly": lambda **_: simple.seasonal_naive_weekly(),
    "seasonal-delta-daily": simple.seasonal_delta_daily,
    "holt-winters": HoltWinters,
    "arima": Arima,
    "kalman-llt": KalmanLLT,
    "auto": Auto,
}

# `forecast eval` runs these when --models is not given (the cheap ones first).
DEFAULT_EVAL_MODELS = ("last-value", "moving-average", "ewma", "holt", "seasonal-naive-daily",
                       "seasonal-delta-daily", "holt-winters", "arima", "kalman-llt", "auto")

