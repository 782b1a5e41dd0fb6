"""``auto``: per series and horizon, last-value unless a cheap kernel's gain over it holds out of sample.

Candidates are the cheap kernels (last value, moving averages, EWMA, damped Holt, seasonal naive and
seasonal delta for daily/weekly seasons once the history covers a season). Each candidate's forecast from
every origin comes out of one O(n) pass, so the backtest costs one pass per candidate; the statsmodels
models are *not* candidates because one of their fits costs more than the whole per-tick budget.

The choice is re-made at anchors (every ``recheck_steps`` steps of data time, see ``memo``) and reused in
between, so the model does not flip every tick and a tick costs one kernel pass. Work is bounded by
construction: at most ``max_points`` points, a fixed candidate list, no iterative optimiser.

Last-value is the default, the safe choice for "I can't tell": a candidate replaces it only when its gain
holds out of sample (``gate``: a block t-test with a Bonferroni correction at the re-check, the replayed
track record of earlier re-checks, and a trial at every tick since the re-check that falls back to
last-value while the choice is losing).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.forecast import kernels as k
from planner.forecast.base import no_forecast
from planner.forecast.empirical import forecast_from_kernel
from planner.forecast.gate import Gate, in_force, replay
from planner.forecast.history import NoHistory, Series, prepare
from planner.forecast.memo import BoundedMemo, anchor_index, memo_key
from planner.forecast.simple import DAY_S, WEEK_S
from planner.types import Forecast

GATE = Gate()


def candidates(s: Series, h: int, min_origins: int = GATE.min_origins) -> list[k.Candidate]:
    out = [k.lv(), k.ma(3), k.ma(6), k.ma(12)]
    out += [k.ew(a) for a in (0.1, 0.2, 0.3, 0.5, 0.7)]
    out += [k.holt(a, b, phi) for a, b, phi in ((0.3, 0.05, 0.9), (0.6, 0.2, 0.9), (0.5, 0.1, 0.98))]
    n = len(s.values)
    for period_s, label in ((DAY_S, "daily"), (WEEK_S, "weekly")):
        period = round(period_s / s.step_s)
        if period >= 2 and n >= period + h + min_origins:
            out.append(k.snaive(period, label))
            if h <= period:
                out += [k.sdelta(period, label, seasons, a) for seasons in (1, 3) for a in (0.3, 0.6)]
    return out


@dataclass(frozen=True)
class Choice:
    candidate: k.Candidate
    origins: int  # backtest origins behind the choice (0: too few, last-value by default)
    anchor_s: float  # data time of the re-check it was made at: its out-of-sample trial starts there


def past_anchors(s: Series, anchor: int, every_steps: int, count: int) -> list[int]:
    """The anchor and the ``count`` anchors before it, as the live loop met them (ascending)."""
    points = [anchor]
    while len(points) <= count and points[-1] >= 1:
        earlier = Series(s.t0_s, s.step_s, s.values[: points[-1]])
        points.append(anchor_index(earlier, every_steps))
    return sorted(set(points))


def choose(y: np.ndarray, h: int, cands: list[k.Candidate], points: list[int], gate: Gate,
           anchor_s: float) -> Choice:
    """The candidate the gate lets replace last-value at the last point of ``y`` (made at ``anchor_s``)."""
    usable = [c for c in cands if len(y) >= c.min_points]
    forecasts = [c.run(y, h) for c in usable]
    # Every candidate also comes as its half-blend with last-value (computed from the same pass).
    half_of = {i: len(usable) + i - 1 for i in range(1, len(usable))}
    forecasts += [0.5 * (y + f) for f in forecasts[1:]]
    every = usable + [k.half_blend(c) for c in usable[1:]]
    index, origins = replay(y, forecasts, h, points, gate, half_of)
    return Choice(every[index], origins, anchor_s)


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
        # The memoised choice outlives the sliding window it was made on: its re-check is found by time.
        anchor = max(0, round((choice.anchor_s - s.t0_s) / s.step_s))
        if choice.candidate.label != "last-value" and not on_trial_still_winning(s.values, f, h, anchor):
            return forecast_from_kernel(s.values, k.lv().run(s.values, h), h, horizon_s, "auto:last-value",
                                        f"{choice.candidate.label} stopped: it lost to last-value since its re-check")
        return forecast_from_kernel(s.values, f, h, horizon_s, f"auto:{choice.candidate.label}")


def on_trial_still_winning(y: np.ndarray, f: np.ndarray, h: int, anchor: int) -> bool:
    """Whether the choice made at ``anchor`` has not lost to last-value since (``gate.in_force``'s rule)."""
    n = len(y)
    if n - 1 <= anchor:
        return True
    d = np.abs(y[h:] - y[: n - h]) - np.abs(y[h:] - f[: n - h]) if n > h else np.zeros(0)
    return bool(in_force(d, y, f, anchor, n, h)[-1])


class Auto:
    name = "auto"

    def __init__(self, recheck_steps: int = 60, max_points: int = 20_160, **gate: float) -> None:
        """``gate``: overrides of :class:`Gate`'s constants (``alpha=0.01`` ...); an unknown name is a TypeError."""
        self.recheck_steps = max(1, int(recheck_steps))
        self.max_points = int(max_points)
        known = {f.name: type(getattr(GATE, f.name)) for f in dataclasses.fields(Gate)}
        unknown = sorted(set(gate) - set(known))
        if unknown:
            raise TypeError(f"auto: unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        self.gate = dataclasses.replace(GATE, **{name: known[name](v) for name, v in gate.items()})
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
        young = Series(s.t0_s, s.step_s, y)

        def make() -> Choice:
            points = past_anchors(young, a, self.recheck_steps, self.gate.replay)
            return choose(y, h, candidates(young, h, self.gate.min_origins), points, self.gate, young.time_of(a))

        return self._memo.get_or_make(memo_key(s, a, "auto", h), make)
