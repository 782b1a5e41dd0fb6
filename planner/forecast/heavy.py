"""statsmodels forecasters: Holt-Winters (ETS), ARIMA (order by AIC over a small grid), Kalman local linear trend.

An estimate (optimiser run) costs 50 ms to seconds, far over a 30 s tick's forecasting budget, so it is made
at anchors only (every ``refit_steps`` steps of data time, memoised by ``memo``) on at most ``fit_points``
points with at most ``maxiter`` optimiser iterations; every tick re-runs the filter with the memoised
parameters on the current window, which costs a few milliseconds. Fit time is bounded by construction
(window, grid, iterations). A caller that wants a hard budget can also inject ``clock`` (a callable
returning seconds) and ``budget_s``: the ARIMA grid stops at the first order that ends past the budget
and keeps the best order so far (the pure core never reads a clock itself).

Any failure (an exception from statsmodels, a non-finite result, the budget spent before any order was
fitted) falls back to last-value and says so in ``Forecast.reason``; a failed estimate is memoised too, so
a series that breaks the optimiser costs one failure per anchor, not one per tick.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.forecast import kernels as k
from planner.forecast.base import no_forecast
from planner.forecast.empirical import _Z, forecast_from_kernel
from planner.forecast.history import NoHistory, Series, prepare
from planner.forecast.memo import BoundedMemo, anchor_index, memo_key
from planner.forecast.simple import DAY_S
from planner.types import QUANTILES, Forecast

# Small on purpose: each order is one optimiser run; these cover random walk + noise, AR level, ARMA.
ARIMA_GRID = ((0, 1, 1), (1, 1, 1), (1, 0, 0), (2, 0, 1))


@contextmanager
def quiet() -> Iterator[None]:
    """Silence statsmodels' convergence chatter (failures surface in ``Forecast.reason`` instead).

    statsmodels adds an "always" filter for its warnings when first imported; importing it *before*
    entering the ignoring context keeps that filter behind ours.
    """
    import statsmodels.tools.sm_exceptions  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@dataclass(frozen=True)
class Estimate:
    params: Any = None
    spec: Any = None
    error: str = ""


def gaussian_forecast(mean: float, se: float, horizon_s: float, model: str) -> Forecast:
    mean = max(0.0, mean)
    se = se if math.isfinite(se) and se > 0 else 0.0
    qs = np.maximum.accumulate(np.maximum([mean + _Z[q] * se for q in QUANTILES], 0.0))
    return Forecast(mean=mean, quantiles={q: float(v) for q, v in zip(QUANTILES, qs, strict=True)},
                    horizon_s=horizon_s, model=model)


@dataclass(frozen=True)
class HeavyFitted:
    history: Series | NoHistory
    owner: StatsmodelsForecaster

    def forecast(self, horizon_s: float) -> Forecast:
        name = self.owner.name
        if not math.isfinite(horizon_s) or horizon_s < 0:
            return no_forecast(horizon_s, name, f"horizon_s must be finite and >= 0, got {horizon_s!r}")
        if isinstance(self.history, NoHistory):
            return no_forecast(horizon_s, name, self.history.reason, self.history.fallback)
        s = self.history
        h = s.steps(horizon_s)
        if len(s.values) < self.owner.min_points:
            return self._fallback(s, h, horizon_s, f"{len(s.values)} points < {self.owner.min_points} needed")
        a = anchor_index(s, self.owner.refit_steps)
        est = self.owner.memo.get_or_make(memo_key(s, a, name), lambda: self.owner.safe_estimate(s, a))
        if est.error:
            return self._fallback(s, h, horizon_s, est.error)
        try:
            with quiet():
                out = self.owner.predict(est, s, h, horizon_s)
        except Exception as exc:  # statsmodels raises many types (LinAlgError, ValueError, ...)
            return self._fallback(s, h, horizon_s, f"predict failed: {type(exc).__name__}: {exc}")
        if not math.isfinite(out.mean) or not all(math.isfinite(v) for v in out.quantiles.values()):
            return self._fallback(s, h, horizon_s, "non-finite forecast")
        return out

    def _fallback(self, s: Series, h: int, horizon_s: float, why: str) -> Forecast:
        return forecast_from_kernel(s.values, k.last_value(s.values, h), h, horizon_s, "last-value",
                                    f"{self.owner.name}: {why}; last-value fallback")


class StatsmodelsForecaster:
    name = "statsmodels"
    min_points = 10

    def __init__(self, refit_steps: int = 60, fit_points: int = 120, maxiter: int = 25,
                 clock: Callable[[], float] | None = None, budget_s: float | None = None) -> None:
        self.refit_steps = max(1, int(refit_steps))
        self.fit_points = int(fit_points)
        self.maxiter = int(maxiter)
        self.clock = clock
        self.budget_s = budget_s
        self.memo: BoundedMemo[Estimate] = BoundedMemo(16)

    def fit(self, times_s: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> HeavyFitted:
        return HeavyFitted(prepare(times_s, values), self)

    def safe_estimate(self, s: Series, anchor: int) -> Estimate:
        y = s.values[max(0, anchor + 1 - self.window_points(s)): anchor + 1]
        if len(y) < self.min_points:
            return Estimate(error=f"{len(y)} points at the refit anchor < {self.min_points} needed")
        if float(np.ptp(y)) == 0.0:
            # A flat window has no variance to estimate from; the optimiser would only thrash on it.
            return Estimate(error="flat history, nothing to estimate")
        try:
            with quiet():
                return self.estimate(y, s)
        except Exception as exc:
            return Estimate(error=f"fit failed: {type(exc).__name__}: {exc}")

    def window_points(self, s: Series) -> int:
        return self.fit_points

    def estimate(self, y: np.ndarray, s: Series) -> Estimate:
        raise NotImplementedError

    def predict(self, est: Estimate, s: Series, h: int, horizon_s: float) -> Forecast:
        raise NotImplementedError


class Arima(StatsmodelsForecaster):
    name = "arima"
    min_points = 16

    def estimate(self, y: np.ndarray, s: Series) -> Estimate:
        from statsmodels.tsa.statespace.sarimax import SARIMAX

        start = self.clock() if self.clock is not None else 0.0
        best: tuple[float, tuple[int, int, int], str, np.ndarray] | None = None
        for order in ARIMA_GRID:
            trend = "c" if order[1] == 0 else "n"
            try:
                res = SARIMAX(y, order=order, trend=trend).fit(disp=False, maxiter=self.maxiter, cov_type="none",
                                                           warn_convergence=False)
            except Exception:
                continue
            if math.isfinite(res.aic) and (best is None or res.aic < best[0]):
                best = (float(res.aic), order, trend, np.asarray(res.params))
            if self.clock is not None and self.budget_s is not None and self.clock() - start > self.budget_s:
                break
        if best is None:
            over = self.clock is not None and self.budget_s is not None and self.clock() - start > self.budget_s
            return Estimate(error="fit budget exceeded before any order converged" if over
                            else "no ARIMA order could be fitted")
        return Estimate(best[3], (best[1], best[2]))

    def predict(self, est: Estimate, s: Series, h: int, horizon_s: float) -> Forecast:
        from statsmodels.tsa.statespace.sarimax import SARIMAX

        order, trend = est.spec
        res = SARIMAX(s.values[-self.fit_points:], order=order, trend=trend).filter(est.params, cov_type="none")
        fc = res.get_forecast(h)
        return gaussian_forecast(float(fc.predicted_mean[-1]), float(fc.se_mean[-1]), horizon_s,
                                 f"arima{order}")


class KalmanLLT(StatsmodelsForecaster):
    name = "kalman-llt"

    def estimate(self, y: np.ndarray, s: Series) -> Estimate:
        from statsmodels.tsa.statespace.structural import UnobservedComponents

        res = UnobservedComponents(y, level="local linear trend").fit(disp=False, maxiter=self.maxiter,
                                                                           cov_type="none", warn_convergence=False)
        return Estimate(np.asarray(res.params))

    def predict(self, est: Estimate, s: Series, h: int, horizon_s: float) -> Forecast:
        from statsmodels.tsa.statespace.structural import UnobservedComponents

        res = UnobservedComponents(s.values[-self.fit_points:], level="local linear trend").filter(est.params, cov_type="none")
        fc = res.get_forecast(h)
        return gaussian_forecast(float(fc.predicted_mean[-1]), float(fc.se_mean[-1]), horizon_s, self.name)


class HoltWinters(StatsmodelsForecaster):
    """Additive damped trend, plus an additive daily season once two days of history exist."""

    name = "holt-winters"

    def __init__(self, period_s: float = DAY_S, **kw: Any) -> None:
        super().__init__(**kw)
        self.period_s = float(period_s)

    def period(self, s: Series) -> int | None:
        p = round(self.period_s / s.step_s)
        return p if p >= 2 and len(s.values) >= 2 * p + 10 else None

    def window_points(self, s: Series) -> int:
        p = self.period(s)
        return max(self.fit_points, 3 * p) if p else self.fit_points

    def _model(self, y: np.ndarray, p: int | None) -> Any:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        if p is not None and len(y) < 2 * p:
            p = None
        return ExponentialSmoothing(y, trend="add", damped_trend=True, seasonal="add" if p else None,
                                    seasonal_periods=p, initialization_method="heuristic"
                                    if p else "estimated")

    def estimate(self, y: np.ndarray, s: Series) -> Estimate:
        p = self.period(s)
        res = self._model(y, p).fit(minimize_kwargs={"options": {"maxiter": self.maxiter}})
        keys = ("smoothing_level", "smoothing_trend", "smoothing_seasonal", "damping_trend")
        return Estimate({key: float(res.params[key]) for key in keys if res.params.get(key) is not None
                         and math.isfinite(res.params[key])}, p)

    def predict(self, est: Estimate, s: Series, h: int, horizon_s: float) -> Forecast:
        p = est.spec
        y = s.values[-self.window_points(s):]
        params = dict(est.params)
        if p is None or len(y) < 2 * p:
            params.pop("smoothing_seasonal", None)
        res = self._model(y, p).fit(optimized=False, **params)
        # Rolling h-step forecasts from the smoothed states give the empirical residual band.
        phi = params.get("damping_trend", 1.0)
        damp = sum(phi**j for j in range(1, h + 1))
        f = np.asarray(res.level) + damp * np.asarray(res.trend)
        if p and res.season is not None:
            season = np.asarray(res.season)
            lag = -(-h // p) * p - h
            shifted = np.full(len(y), np.nan)
            if lag < len(y):
                shifted[lag:] = season[: len(y) - lag]
            f = f + shifted
        f[-1] = float(np.asarray(res.forecast(h))[-1])
        return forecast_from_kernel(y, f, h, horizon_s, self.name)
