"""Forecaster names -> constructors: the one list of models. These names are a contract (policies,
``planner forecast eval --models``): add, never rename.

``names()`` is what configuration validation and the CLI offer; ``make_forecaster(name, **options)``
builds one (options go to the constructor); ``DEFAULT_EVAL_MODELS`` is what ``forecast eval`` runs when
no models are named.
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


def names() -> tuple[str, ...]:
    """Every forecaster name, sorted (the allowed values of a policy's ``forecast.model``)."""
    return tuple(sorted(REGISTRY))


def make_forecaster(name: str, **options: float) -> Forecaster:
    """Forecaster by name; an unknown name is a ValueError that lists the allowed ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown forecaster {name!r}; known: {', '.join(names())}")
    return REGISTRY[name](**options)
