"""NVIDIA Dynamo's load predictors (``--load-predictor``), re-expressed for the ``dynamo-*`` baselines.

Followed: ``components/src/dynamo/planner/utils/load_predictor.py`` in ai-dynamo/dynamo, read at commit 0ff50012
(the nearest stored version to the 002a7c31 planner the baselines follow; version note in ``dynamo_throughput.py``;
its ``kalman`` defaults and 5-point ARIMA minimum agree with 002a7c31's ``planner_argparse.py``). Each predictor is fed one point per adjustment interval and
asked for the next one, as Dynamo's ``add_data_point`` / ``predict_next`` are:

- every predictor skips the leading run of zeros (the idle period after a deploy) and turns NaN into 0;
- ``constant``: the last value;
- ``arima``: Dynamo fits pmdarima's ``auto_arima`` once it has 5 points (the last value before that), and
  refits on ``log1p(y)`` when the raw fit collapses to a (0, d, 0) order; a constant series is returned as is;
  a failed fit returns the last value. pmdarima is not a dependency here, so the same steps run on statsmodels:
  ``d`` from the KPSS test (at most 2, pmdarima's ``ndiffs`` default), then the (p, q) with the lowest AIC among
  p + q <= 2 (pmdarima's stepwise search may go to 5 each; a planner's few dozen points rarely support more,
  and each extra MA term costs seconds of likelihood fitting). The order is chosen once, as Dynamo's is; each
  new point then refits it starting from the previous parameters, as pmdarima's ``update`` does;
- ``kalman``: a local linear-trend Kalman filter (level and trend; Q = diag(1.0, 0.1), R = 10, P0 = 1000 I,
  Dynamo's ``kalman_q_level/q_trend/r``), one predict-then-update per point; like Dynamo's it forecasts as soon
  as it has one point (its ``kalman_min_points`` is stored but not checked in ``predict_next``);
- ``prophet`` is not modelled (refused by name, never replaced by another).

Departure from Dynamo, on purpose: whenever the value returned is not the model's own forecast (warming up,
nothing to predict from, failed fit), ``predict_next`` says so in its note, so a decision built on it carries a
``forecast_fallback`` reason instead of falling back silently.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from planner.errors import UserError

PREDICTORS = ("constant", "arima", "kalman")
ARIMA_MIN_POINTS = 5  # Dynamo's ARIMAPredictor(minimum_data_points=5)
ARIMA_PQ = ((0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2))  # (p, q) searched: p + q <= 2


@dataclass(frozen=True)
class Prediction:
    value: float
    note: str = ""  # empty: the model's own forecast; otherwise why it is not (and what was returned)


@dataclass
class _Buffer:
    """Dynamo's BasePredictor.add_data_point: NaN -> 0, leading zeros skipped."""

    values: list[float] = field(default_factory=list)
    seen_nonzero: bool = False

    def add(self, value: float) -> bool:
        v = 0.0 if math.isnan(value) else float(value)
        if v == 0.0 and not self.seen_nonzero:
            return False
        self.seen_nonzero = self.seen_nonzero or v != 0.0
        self.values.append(v)
        return True

    def last(self) -> float:
        return self.values[-1] if self.values else 0.0


class ConstantPredictor:
    name = "constant"

    def __init__(self) -> None:
        self.buf = _Buffer()

    def add_data_point(self, value: float) -> None:
        self.buf.add(value)

    def predict_next(self) -> Prediction:
        if not self.buf.values:
            return Prediction(0.0, "constant: no non-zero point yet; 0 (as Dynamo)")
        return Prediction(self.buf.last())


def _ndiffs_kpss(y: np.ndarray, max_d: int = 2) -> int:
    from statsmodels.tsa.stattools import kpss

    d = 0
    x = y
    while d < max_d and len(x) > 3 and np.ptp(x) > 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # KPSS p-values outside its table, tiny samples: the decision stands
            p_value = kpss(x, regression="c", nlags="auto")[1]
        if p_value >= 0.05:
            break
        d += 1
        x = np.diff(x)
    return d


def _fit_arima(y: np.ndarray, order: tuple[int, int, int],  # noqa: ANN202 - statsmodels results object
               start_params: np.ndarray | None = None):
    from statsmodels.tsa.arima.model import ARIMA

    trend = "c" if order[1] == 0 else ("t" if order[1] == 1 else "n")  # pmdarima's with_intercept="auto"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings on a handful of points: judged by AIC instead
        return ARIMA(y, order=order, trend=trend).fit(start_params=start_params)


def _auto_order(y: np.ndarray) -> tuple[int, int, int]:
    d = _ndiffs_kpss(y)
    best: tuple[float, tuple[int, int, int]] | None = None
    for p, q in ARIMA_PQ:
        if p + q + d + 2 > len(y):  # leave the fit at least one degree of freedom
            continue
        aic = float(_fit_arima(y, (p, d, q)).aic)
        if math.isfinite(aic) and (best is None or aic < best[0]):
            best = (aic, (p, d, q))
    if best is None:
        raise ValueError(f"no ARIMA order fits {len(y)} points")
    return best[1]


class ArimaPredictor:
    name = "arima"

    def __init__(self, log1p: bool = False) -> None:
        self.buf = _Buffer()
        self.log1p = log1p  # Dynamo's --load-predictor-log1p (default off)
        self.order: tuple[int, int, int] | None = None
        self.params: np.ndarray | None = None  # the last fit's, to start the next from (pmdarima's update)

    def add_data_point(self, value: float) -> None:
        self.buf.add(max(0.0, value) if not math.isnan(value) else value)

    def predict_next(self) -> Prediction:
        raw = np.asarray(self.buf.values, dtype=np.float64)
        n = len(raw)
        if n < ARIMA_MIN_POINTS:
            return Prediction(self.buf.last(), f"arima: {n}/{ARIMA_MIN_POINTS} points; last value (as Dynamo)")
        if np.ptp(raw) == 0:
            return Prediction(float(raw[0]))  # Dynamo's answer for a constant series, and the right one
        try:
            if self.order is None:
                self.order = _auto_order(np.log1p(raw) if self.log1p else raw)
                if not self.log1p and self.order[0] == 0 and self.order[2] == 0:
                    # Dynamo: a raw fit that collapses to (0, d, 0) is redone on log1p(y) for spiky series.
                    self.log1p = True
                    self.order = _auto_order(np.log1p(raw))
                self.params = None
            y = np.log1p(raw) if self.log1p else raw
            res = _fit_arima(y, self.order, self.params)
            self.params = np.asarray(res.params)
            f = float(res.forecast(1)[0])
            value = math.expm1(f) if self.log1p else f
            if not math.isfinite(value):
                raise ValueError(f"forecast is {value!r}")
            return Prediction(max(0.0, value))
        except Exception as exc:  # noqa: BLE001 - Dynamo returns the last value on any failure; we say so
            return Prediction(self.buf.last(), f"arima: fit failed ({type(exc).__name__}: {exc}); last value")


class KalmanPredictor:
    name = "kalman"

    def __init__(self, q_level: float = 1.0, q_trend: float = 0.1, r: float = 10.0) -> None:
        self.buf = _Buffer()
        self.x: np.ndarray | None = None  # [level, trend]
        self.p = np.eye(2) * 1000.0
        self.f = np.array([[1.0, 1.0], [0.0, 1.0]])
        self.q = np.diag([max(1e-12, q_level), max(1e-12, q_trend)])
        self.r = max(1e-9, r)
        self.cached: float | None = None  # predict_next already advanced the filter this interval

    def _predict(self) -> None:
        assert self.x is not None
        self.x = self.f @ self.x
        self.p = self.f @ self.p @ self.f.T + self.q

    def add_data_point(self, value: float) -> None:
        if not self.buf.add(value):
            return
        z = self.buf.last()
        if self.x is None:
            self.x = np.array([z, 0.0])
        else:
            if self.cached is None:
                self._predict()
            s = self.p[0, 0] + self.r  # H = [1, 0]
            k = self.p[:, 0] / s
            self.x = self.x + k * (z - self.x[0])
            self.p = self.p - np.outer(k, self.p[0, :])
        self.cached = None

    def predict_next(self) -> Prediction:
        if self.x is None:
            return Prediction(0.0, "kalman: no non-zero point yet; 0 (as Dynamo)")
        if self.cached is None:
            self._predict()
            assert self.x is not None
            self.cached = float(self.x[0])
        return Prediction(self.cached)


Predictor = ConstantPredictor | ArimaPredictor | KalmanPredictor


def make_predictor(name: str) -> Predictor:
    if name == "constant":
        return ConstantPredictor()
    if name == "arima":
        return ArimaPredictor()
    if name == "kalman":
        return KalmanPredictor()
    raise UserError(f"dynamo_predictor: {name!r}; allowed: {', '.join(PREDICTORS)} "
                    "(Dynamo's prophet is not modelled)", key="dynamo_predictor")
