"""The planner with a perfect forecast: the decision core fed the trace's true future load (sim-only).

It separates the two halves of the headline number. The offline schedule knows the future *and* searches
sizes by simulation; this baseline knows the same future but sizes it with the planner's own decide()
(queueing model, calibration, behaviour, floors). Its gap to the offline schedule is the decision core's
cost; the gap from it to the planner is what forecasting a bursty trace from its past costs.

The forecast at time t for each series is its largest value over the metrics windows that end in
(t, t + startup_s + interval_s], the span the planner's own forecast covers (the larger of its near and far
horizons), with every quantile equal to that value: no headroom is needed when nothing is uncertain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from planner.config import ScalingPolicy, ScalingRules
from planner.controller import PlannerController, Sample
from planner.decide import PlannerState
from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.sim.cluster.metrics import prompt_buckets
from planner.sim.traces.records import RequestTrace
from planner.types import QUANTILES, Forecast, LengthMix, LoadForecast

NAME = "planner+perfect-forecast"
FREE_NAME = "planner+perfect-forecast, scale-down unrestricted"


class PerfectForecast:
    """A LoadForecaster that reads the trace ahead instead of extrapolating the history."""

    def __init__(self, trace: RequestTrace, window_s: float, interval_s: float, startup_s: float) -> None:
        self.window_s = float(window_s)
        self.interval_s = float(interval_s)
        self.far_s = startup_s + self.interval_s
        self._arrival_s = trace.arrival_s  # sorted (RequestTrace's contract)
        self._isl = trace.isl.astype(np.float64)
        self._isl_cum = np.concatenate(([0.0], np.cumsum(trace.isl, dtype=np.float64)))
        self._osl_cum = np.concatenate(([0.0], np.cumsum(trace.osl, dtype=np.float64)))

    def _window(self, end_s: float) -> tuple[float, float, float]:
        """(requests, prompt tokens, output tokens) arriving in the metrics window ending at ``end_s``."""
        lo = int(np.searchsorted(self._arrival_s, end_s - self.window_s, side="left"))
        hi = int(np.searchsorted(self._arrival_s, end_s, side="left"))
        return float(hi - lo), float(self._isl_cum[hi] - self._isl_cum[lo]), float(self._osl_cum[hi] - self._osl_cum[lo])

    def forecast(self, history: Sequence[Sample], now_s: float) -> tuple[LoadForecast | None, bool]:
        ends = now_s + np.arange(1, int(math.ceil(self.far_s / self.interval_s)) + 1) * self.interval_s
        windows = [self._window(float(e)) for e in ends]
        n = sum(w[0] for w in windows)
        rate = max(w[0] for w in windows) / self.window_s
        prefill_tps = max(w[1] for w in windows) / self.window_s
        decode_tps = max(w[2] for w in windows) / self.window_s
        isl = sum(w[1] for w in windows) / n if n else math.nan
        osl = sum(w[2] for w in windows) / n if n else math.nan

        def exact(v: float) -> Forecast:
            ok = math.isfinite(v)
            return Forecast(v, {q: v for q in QUANTILES}, self.far_s, "perfect", ok, "" if ok else "no requests ahead")

        return LoadForecast(exact(rate), exact(isl), exact(osl), exact(prefill_tps), exact(decode_tps),
                            self._mix(now_s, float(ends[-1]))), False

    def _mix(self, now_s: float, end_s: float) -> LengthMix | None:
        """The prompt-length mix of the requests that will arrive over the horizon, bucketed as engines do."""
        lo = int(np.searchsorted(self._arrival_s, now_s, side="left"))
        hi = int(np.searchsorted(self._arrival_s, end_s, side="left"))
        return LengthMix.from_buckets(prompt_buckets(self._isl[lo:hi]))


def clairvoyant_planner(policy: PolicyFile, profile: Profile, trace: RequestTrace, window_s: float,
                        initial_state: PlannerState | None = None, name: str = NAME) -> PlannerController:
    """The planner's own controller and decide(), its future load handed in through ``PerfectForecast``."""
    forecast = PerfectForecast(trace, window_s, policy.interval_s, policy.startup_s)
    return PlannerController(policy, profile, forecast, initial_state, name=name)


def with_free_scale_down(policy: PolicyFile) -> PolicyFile:
    """``policy`` with its scale-down unrestricted: no stabilisation window, any share per interval.

    Only a controller that knows the future may give capacity back this fast (its forecast already covers the
    start-up lead): the offline search starts from this schedule too, because the search only trims down from
    where it starts, and without this seed no start is that low: the planner fed the true load this way can
    beat the offline schedule on both axes (README, "Headline benchmark", on the yardstick)."""
    free = ScalingRules(stabilization_window_s=0, select_policy="max",
                        policies=[ScalingPolicy(type="percent", value=100, period_s=max(1, int(policy.interval_s)))])
    return policy.model_copy(update={"behavior": policy.behavior.model_copy(update={"scale_down": free})})
