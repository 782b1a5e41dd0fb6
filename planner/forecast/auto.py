"""``auto``: per series, the kernel with the lowest recent rolling-origin error at the requested horizon.

Candidates are the cheap kernels (last value, moving averages, EWMA, damped Holt, seasonal naive and
seasonal delta for daily/weekly seasons once the history covers a season). Each candidate's forecast from
every origin comes out of one O(n) pass, so the backtest costs one pass per candidate; the statsmodels
models are *not* candidates because one of their fits costs more than the whole per-tick budget.

The choice is re-made at anchors (every ``recheck_steps`` steps of data time, see ``memo``) and reused in
between, so the model does not flip every tick and a tick costs one kernel pass. Work is bounded by
construction: at most ``max_points`` points, a fixed candidate list, no iterative optimiser.

A candidate must beat last-value by ``margin`` (relative MAE) *and* by more than the backtest's noise
(``Z_CLEAR`` standard errors of the error difference) to be picked: on a short or noisy series the
backtest winner is partly luck, and last-value is the safe choice for "I can't tell".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.forecast import kernels as k
from planner.forecast.base import no_forecast
from planner.forecast.empirical import forecast_from_kernel
from planner.forecast.history import NoHistory, Series, prepare
from planner.forecast.memo import BoundedMemo, anchor_index, memo_key
from planner.forecast.simple import DAY_S, WEEK_S
from planner.types import Forecast

MIN_BACKTEST = 24
Z_CLEAR = 1.0


def candidates(s: Series, h: int) -> list[k.Candidate]:
    out = [k.lv(), k.ma(3), k.ma(6), k.ma(12)]
    out += [k.ew(a) for a in (0.1, 0.2, 0.3, 0.5, 0.7)]
    out += [k.holt(a, b, phi) for a, b, phi in ((0.3, 0.05, 0.9), (0.6, 0.2, 0.9), (0.5, 0.1, 0.98))]
    n = len(s.values)
    for period_s, label in ((DAY_S, "daily"), (WEEK_S, "weekly")):
        period = round(period_s / s.step_s)
        if period >= 2 and n >= period + h + MIN_BACKTEST:
            out.append(k.snaive(period, label))
            if h <= period:
                out += [k.sdelta(period, label, seasons, a) for seasons in (1, 3) for a in (0.3, 0.6)]
    return out


@dataclass(frozen=True)
class Choice:
    candidate: k.Candidate
    mae: float
    last_value_mae: float
    origins: int


def choose(y: np.ndarray, h: int, cands: list[k.Candidate], window: int, margin: float) -> Choice:
    """Lowest h-step MAE relative to last-value's, over the last ``window`` origins each candidate covers.

    Scoring each candidate against last-value *on the same origins* lets a seasonal candidate (defined
    only after one season) compete fairly with kernels defined from the first point.
    """
    n = len(y)
    last_origin = n - 1 - h  # the last origin whose target is observed
    lo_window = max(0, last_origin + 1 - window)
    if last_origin + 1 - lo_window < MIN_BACKTEST:
        return Choice(k.lv(), math.nan, math.nan, max(0, last_origin + 1 - lo_window))
    target = y[lo_window + h: last_origin + 1 + h]
    lv_err = np.abs(target - y[lo_window: last_origin + 1])
    best = Choice(k.lv(), float(lv_err.mean()), float(lv_err.mean()), len(target))
    best_ratio = 1.0 - margin
    for c in cands[1:]:
        if n < c.min_points:
            continue
        f = c.run(y, h)[lo_window: last_origin + 1]
        ok = np.isfinite(f)
        if ok.sum() < MIN_BACKTEST:
            continue
        err = np.abs(target[ok] - f[ok])
        base = float(lv_err[ok].mean())
        ratio = float(err.mean()) / base if base > 0 else (0.0 if err.mean() == 0 else math.inf)
        # Picked only if the gain over last-value is clear of the backtest's own noise: the mean error
        # difference must stay below zero after adding z standard errors (h-step errors overlap, so the
        # effective sample is ~n/h, hence sqrt(h)).
        diff = err - lv_err[ok]
        noise = Z_CLEAR * float(np.std(diff)) * math.sqrt(h / len(diff))
        if float(diff.mean()) + noise < 0 and ratio < best_ratio:
            best, best_ratio = Choice(c, float(err.mean()), base, int(ok.sum())), ratio
    return best


@dataclass(frozen=True)
class AutoFitted:
    history: Series | NoHistory
    owner: Auto

    def forecast(self, horizon_s: float) -> Forecast:
        if not math.isfinite(horizon_s) or horizon_s < 0:
            return no_forecast(horizon_s, "auto", f"horizon_s must be finite and >= 0, got {horizon_s!r}")
        if isinstance(self.history, NoHistory):
            return no_forecast(horizon_s, "auto", self.history.reason, self.history.fallback)
        s = self.history
        h = s.steps(horizon_s)
        choice = self.owner.choice(s, h)
        f = choice.candidate.run(s.values, h)
        return forecast_from_kernel(s.values, f, h, horizon_s, f"auto:{choice.candidate.label}")


class Auto:
    name = "auto"

    def __init__(self, recheck_steps: int = 60, window: int = 288, max_points: int = 20_160,
                 margin: float = 0.02) -> None:
        self.recheck_steps = max(1, int(recheck_steps))
        self.window = int(window)
        self.max_points = int(max_points)
        self.margin = float(margin)
        self._memo: BoundedMemo[Choice] = BoundedMemo(16)

    def fit(self, times_s: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> AutoFitted:
        s = prepare(times_s, values)
        if isinstance(s, Series) and len(s.values) > self.max_points:
            cut = len(s.values) - self.max_points
            s = Series(s.time_of(cut), s.step_s, s.values[cut:], s.filled, s.dropped)
        return AutoFitted(s, self)

    def choice(self, s: Series, h: int) -> Choice:
        a = anchor_index(s, self.recheck_steps)
        y = s.values[: a + 1]
        return self._memo.get_or_make(memo_key(s, a, "auto", h),
                                      lambda: choose(y, h, candidates(Series(s.t0_s, s.step_s, y), h),
                                                     self.window, self.margin))
