"""The planner as a Controller: observations -> history -> load forecast -> decide(). No clock, no I/O.

The simulator, backtests and the live control loop all drive it through ``tick(observation, now_s)``. It
sits above the pure decision core: it keeps the history and asks a ``LoadForecaster`` for the load ahead.
``HistoryForecast`` forecasts it from the history with the policy's model; the backtest's perfect-forecast
baseline passes one that reads the trace ahead (planner/sim/evaluate/clairvoyant.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from planner.config import Policy
from planner.decide import DeciderSpec, PlannerState, decide
from planner.decide.demand import ISL_SOURCES, OSL_SOURCES
from planner.decide.error_budget import BudgetSample, budget_status
from planner.decide.error_budget import sample_of as budget_sample
from planner.errors import UserError
from planner.forecast import Forecaster, LastValue, make_forecaster
from planner.forecast.burst import MEASURES, rate_rise
from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.types import (
    Decision,
    Forecast,
    LengthMix,
    LoadForecast,
    Mode,
    NoData,
    Observation,
    Pool,
    Reason,
    SlaBudget,
)


@dataclass(frozen=True)
class Sample:
    at_s: float
    rate_rps: float
    isl_tokens: float  # NaN when no request started in the window
    osl_tokens: float
    isl_buckets: tuple[tuple[float, float], ...] = ()  # the window's prompt-length histogram (may be empty)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.rate_rps * self.isl_tokens if self.rate_rps > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.rate_rps * self.osl_tokens if self.rate_rps > 0 else 0.0


SERIES = ("rate_rps", "isl_tokens", "osl_tokens", "prefill_tokens_per_s", "decode_tokens_per_s")


def sample_of(policy: Policy, obs: Observation) -> Sample | None:
    """One history point from an observation: arrivals from the pool every request starts in."""
    order = (Pool.AGGREGATED,) if policy.mode is Mode.AGGREGATED else (Pool.PREFILL, Pool.DECODE)
    arrivals = next((obs.pools[p] for p in order if p in obs.pools), None)
    if arrivals is None:
        return None

    def mean(attr: str, prefer: tuple[Pool, ...]) -> float:
        for p in prefer:
            v = getattr(obs.pools[p], attr) if p in obs.pools else None
            if v is not None and math.isfinite(v) and v > 0:
                return float(v)
        return math.nan

    return Sample(obs.at_s, arrivals.rate_rps, mean("isl_mean", ISL_SOURCES), mean("osl_mean", OSL_SOURCES),
                  arrivals.isl_buckets)


# The prompt-length mix's shape is taken from this much recent history: long enough that a window of few
# requests does not swing it, short enough to follow a change of workload within a few minutes.
MIX_HISTORY_S = 600.0


def recent_mix(history: Sequence[Sample], span_s: float = MIX_HISTORY_S) -> LengthMix | None:
    """The prompt-length mix of the requests started over the last ``span_s`` of history (None: unknown)."""
    if not history:
        return None
    since = history[-1].at_s - span_s
    counts: dict[float, float] = {}
    for sample in history:
        if sample.at_s > since:
            for bound, n in sample.isl_buckets:
                counts[bound] = counts.get(bound, 0.0) + n
    return LengthMix.from_buckets(tuple(counts.items()))


class LoadForecaster(Protocol):
    """The load ahead at ``now_s``, and whether it had to fall back to last-value to get it."""

    def forecast(self, history: Sequence[Sample], now_s: float) -> tuple[LoadForecast | None, bool]: ...


def _max_forecast(a: Forecast, b: Forecast) -> Forecast:
    """The larger of two horizons' forecasts, quantile by quantile.

    Capacity removed now is gone at once, capacity added now arrives after ``startup_s``: what the pools
    hold must cover the whole span up to the far horizon, not only its end.
    """
    if not a.ok:
        return b
    if not b.ok:
        return a
    qs = {q: max(a.quantiles.get(q, a.mean), b.quantiles.get(q, b.mean)) for q in set(a.quantiles) | set(b.quantiles)}
    return Forecast(max(a.mean, b.mean), qs, b.horizon_s, b.model, True, b.reason)


def _nonnegative(f: Forecast) -> Forecast:
    if not f.ok:
        return f
    return replace(f, mean=max(0.0, f.mean), quantiles={q: max(0.0, v) for q, v in f.quantiles.items()})


class HistoryForecast:
    """Each series forecast from its own history by ``forecaster`` at the near (one interval) and far
    (start-up + interval) horizons, the larger of the two kept; a forecaster that raises falls back to
    last-value for that tick (and says so)."""

    def __init__(self, forecaster: Forecaster, interval_s: float, startup_s: float) -> None:
        self.forecaster = forecaster
        self.horizons_s = (interval_s, startup_s + interval_s)

    def forecast(self, history: Sequence[Sample], now_s: float) -> tuple[LoadForecast | None, bool]:
        if not history:
            return None, False
        times = [s.at_s for s in history]
        fell_back = False
        out = []
        for attr in SERIES:
            values = [getattr(s, attr) for s in history]
            try:
                fitted = self.forecaster.fit(times, values)
                near, far = (fitted.forecast(h) for h in self.horizons_s)
            except Exception:  # noqa: BLE001 - a broken forecaster must not stop scaling; say so instead
                fell_back = True
                fitted = LastValue().fit(times, values)
                near, far = (fitted.forecast(h) for h in self.horizons_s)
            combined = _max_forecast(near, far)
            if not combined.ok:
                fell_back = fell_back or attr == "rate_rps"
            out.append(_nonnegative(combined))
        # Until the history spans the decision horizon the forecast has nothing to extrapolate from: say so
        # (reason forecast_fallback; decide() then allows no scale-down).
        span_s = history[-1].at_s - history[0].at_s
        if span_s < self.horizons_s[1] and out[0].ok:
            out[0] = replace(out[0], ok=False, reason=f"history spans {span_s:.0f} s < horizon {self.horizons_s[1]:.0f} s")
        rate, isl, osl, prefill_tps, decode_tps = out
        return LoadForecast(rate, isl, osl, prefill_tps, decode_tps, recent_mix(history)), fell_back


class PlannerController:
    """History + load forecaster + decide(), with the decision state carried from tick to tick."""

    name = "planner"

    def __init__(self, policy: PolicyFile, profile: Profile, forecaster: LoadForecaster,
                 initial_state: PlannerState | None = None, name: str = "planner") -> None:
        self.name = name
        self.policy = policy
        self.spec = DeciderSpec.build(policy, profile, policy.stale_after_s)
        self.interval_s = float(policy.interval_s)
        self.forecaster = forecaster
        self.state = initial_state or PlannerState()
        keep = max(2, int(policy.forecast.history_s // policy.interval_s) + 1)
        self.history: deque[Sample] = deque(maxlen=keep)
        self.last_forecast: LoadForecast | None = None
        # The error budget's measure, one sample per interval over sla.window_s (sla.budget_control).
        self.budget_samples: deque[BudgetSample] = deque(maxlen=int(policy.sla.window_s // policy.interval_s) + 2)
        self.last_budget: SlaBudget | None = None
        # Where the SLA's promise began, when later than a window ago (None: a rolling window). A replay sets it
        # to the start of its scored window, so that its warm-up's transient is not spent from the budget.
        self.budget_since_s: float | None = None

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        forecast, fell_back = None, False
        if isinstance(observation, Observation):
            sample = sample_of(self.policy, observation)
            if sample is not None:
                if self.history and sample.at_s <= self.history[-1].at_s:
                    self.history.pop()  # a re-read of the same window replaces the earlier one
                self.history.append(sample)
            forecast, fell_back = self.forecaster.forecast(self.history, now_s)
            if forecast is not None and self.policy.behavior.steady is not None:
                forecast = replace(forecast, rate_cv=self._rate_cv(now_s))
            if forecast is not None and self.policy.behavior.rise_hold is not None:
                forecast = replace(forecast, rate_rise=self._rate_rise())
            if self.policy.sla.budget_control:
                self.last_budget = self._budget(observation, now_s)
                if forecast is not None:
                    forecast = replace(forecast, sla_budget=self.last_budget)
        self.last_forecast = forecast
        decision, self.state = decide(self.spec, observation, forecast, self.state, now_s)
        if fell_back and Reason.NO_DATA_HOLD not in decision.reasons:
            decision = _with_reason(decision, Reason.FORECAST_FALLBACK)
        return decision

    def _budget(self, observation: Observation, now_s: float) -> SlaBudget | None:
        """The SLA budget over sla.window_s, this interval's measure included (None: too little measured)."""
        mode = self.policy.mode
        sample = budget_sample(observation, mode.ttft_pool, mode.itl_pool, self.interval_s)
        if sample is not None:
            if self.budget_samples and sample.at_s <= self.budget_samples[-1].at_s:
                self.budget_samples.pop()  # a re-read of the same window replaces the earlier one
            self.budget_samples.append(sample)
        return budget_status(self.budget_samples, now_s, self.policy.sla.window_s, self.policy.sla.percentile,
                             self.budget_since_s)

    def _rate_rise(self) -> float | None:
        """How far the arrival rate's latest read rose over the one before (unknown when they are more than two
        intervals apart: a gap in the reads says nothing about the trend)."""
        last = [self.history[-2], self.history[-1]] if len(self.history) >= 2 else []
        return rate_rise([s.at_s for s in last], [s.rate_rps for s in last], self.policy.metrics.window_s,
                         2.0 * self.interval_s)

    def _rate_cv(self, now_s: float) -> float | None:
        """The arrival rate's burstiness over ``behavior.steady.over_s`` of history (it picks the scale-down
        rules); the rates were read over ``metrics.window_s`` windows."""
        steady = self.policy.behavior.steady
        assert steady is not None
        return MEASURES[steady.measure]([s.at_s for s in self.history], [s.rate_rps for s in self.history], now_s,
                                        steady.over_s, self.policy.metrics.window_s)


def _with_reason(decision: Decision, reason: Reason) -> Decision:
    pools = {n: p if reason in p.reasons else replace(p, reasons=(*p.reasons, reason))
             for n, p in decision.pools.items()}
    reasons = decision.reasons if reason in decision.reasons else (*decision.reasons, reason)
    return replace(decision, pools=pools, reasons=reasons)


def initial_state(targets: dict[str, int] | None) -> PlannerState | None:
    """The state of a controller that finds pools already at ``targets`` (what is running, from the actuator
    or the simulator): without it a NoData hold on the first tick would "hold" the floors and tear a warm
    cluster down."""
    if not targets:
        return None
    from planner.decide.state import PoolMemory

    return PlannerState(pools={Pool(p): PoolMemory(target=n) for p, n in targets.items()})


def make_planner_controller(policy: PolicyFile, profile: Profile, forecaster: str | None = None,
                            initial: dict[str, int] | None = None) -> PlannerController:
    """The planner for ``policy``; ``forecaster`` overrides ``policy.forecast.model`` (e.g. "last-value")."""
    name = forecaster or policy.forecast.model
    try:
        model = make_forecaster(name)
    except ValueError as exc:
        key = "forecaster" if forecaster else "forecast.model"
        raise UserError(f"{key}: {exc}", key=key) from None
    return PlannerController(policy, profile, HistoryForecast(model, policy.interval_s, policy.startup_s),
                             initial_state(initial))
