"""The planner as a Controller: history -> forecaster -> LoadForecast -> decide(). Pure (no clock, no I/O).

The simulator, backtests and the live control loop all drive it through ``tick(observation, now_s)``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from planner.config import Policy
from planner.decide.decider import decide
from planner.decide.state import PlannerState
from planner.forecast import Forecaster, LastValue, make_forecaster
from planner.profile import Profile
from planner.types import Decision, Forecast, LoadForecast, NoData, Observation, Reason


@dataclass(frozen=True)
class Sample:
    at_s: float
    rate_rps: float
    isl_tokens: float  # NaN when no request started in the window
    osl_tokens: float

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.rate_rps * self.isl_tokens if self.rate_rps > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.rate_rps * self.osl_tokens if self.rate_rps > 0 else 0.0


def sample_of(policy: Policy, obs: Observation) -> Sample | None:
    """One history point from an observation: arrivals from the pool every request starts in."""
    order = ("aggregated",) if policy.mode == "aggregated" else ("prefill", "decode")
    arrivals = next((obs.pools[p] for p in order if p in obs.pools), None)
    if arrivals is None:
        return None

    def mean(attr: str, prefer: tuple[str, ...]) -> float:
        for p in prefer:
            v = getattr(obs.pools[p], attr) if p in obs.pools else None
            if v is not None and math.isfinite(v) and v > 0:
                return float(v)
        return math.nan

    return Sample(obs.at_s, arrivals.rate_rps, mean("isl_mean", ("prefill", "aggregated", "decode")),
                  mean("osl_mean", ("decode", "aggregated", "prefill")))


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


class PlannerController:
    name = "planner"

    def __init__(self, policy: Policy, profile: Profile, forecaster: Forecaster, fallback: str = "") -> None:
        self.policy = policy
        self.profile = profile
        self.interval_s = float(policy.interval_s)
        self.forecaster = forecaster
        self.fallback = fallback  # why the policy's forecaster is not the one in use ("" when it is)
        self.state = PlannerState()
        keep = max(2, int(policy.forecast.history_s // policy.interval_s) + 1)
        self.history: deque[Sample] = deque(maxlen=keep)
        self.last_forecast: LoadForecast | None = None

    @property
    def horizons_s(self) -> tuple[float, float]:
        return self.interval_s, self.policy.startup_s + self.interval_s

    def forecast(self) -> tuple[LoadForecast | None, bool]:
        """The load forecast over the horizons, and whether a fallback to last-value was needed."""
        if not self.history:
            return None, False
        times = [s.at_s for s in self.history]
        fell_back = bool(self.fallback)
        out = []
        for attr in ("rate_rps", "isl_tokens", "osl_tokens", "prefill_tokens_per_s", "decode_tokens_per_s"):
            values = [getattr(s, attr) for s in self.history]
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
        span_s = self.history[-1].at_s - self.history[0].at_s
        if span_s < self.horizons_s[1] and out[0].ok:
            out[0] = replace(out[0], ok=False, reason=f"history spans {span_s:.0f} s < horizon {self.horizons_s[1]:.0f} s")
        return LoadForecast(*out), fell_back

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        if isinstance(observation, Observation):
            sample = sample_of(self.policy, observation)
            if sample is not None:
                if self.history and sample.at_s <= self.history[-1].at_s:
                    self.history.pop()  # a re-read of the same window replaces the earlier one
                self.history.append(sample)
        forecast, fell_back = (None, False) if isinstance(observation, NoData) else self.forecast()
        self.last_forecast = forecast
        decision, self.state = decide(self.policy, self.profile, observation, forecast, self.state, now_s)
        if fell_back and Reason.NO_DATA_HOLD not in decision.reasons:
            decision = _with_reason(decision, Reason.FORECAST_FALLBACK, self.fallback)
        return decision


def _nonnegative(f: Forecast) -> Forecast:
    if not f.ok:
        return f
    return replace(f, mean=max(0.0, f.mean), quantiles={q: max(0.0, v) for q, v in f.quantiles.items()})


def _with_reason(decision: Decision, reason: Reason, note: str) -> Decision:
    pools = {n: p if reason in p.reasons else replace(p, reasons=(*p.reasons, reason))
             for n, p in decision.pools.items()}
    reasons = decision.reasons if reason in decision.reasons else (*decision.reasons, reason)
    detail = {**decision.detail, "forecast_fallback": note} if note else decision.detail
    return replace(decision, pools=pools, reasons=reasons, detail=detail)


def make_planner_controller(policy: Policy, profile: Profile, forecaster: str | None = None,
                            factory: Callable[[str], Forecaster] = make_forecaster) -> PlannerController:
    """The planner for ``policy``; ``forecaster`` overrides ``policy.forecast.model`` (e.g. "last-value")."""
    name = forecaster or policy.forecast.model
    try:
        model = factory(name)
        note = ""
    except ValueError as exc:
        # The forecaster registry is optional: until a model exists, size from the last value, and say so in
        # every decision (reason forecast_fallback) rather than silently degrading.
        model, note = LastValue(), f"forecaster {name!r} unavailable ({exc}); using last-value"
    return PlannerController(policy, profile, model, note)
