"""What-if sizing (``planner plan``): the Decision for a steady, given load, with no history and no state.

The load is turned into a synthetic observation (one window of ``rate_rps``) and a flat forecast (every
quantile equal to the given value), and ``decide`` does the rest, so a what-if answer and a control tick at
that steady load size the pools alike except for behaviour: a what-if has nothing to stabilise against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.config import Behavior, Policy, ScalingRules
from planner.decide.decider import decide
from planner.decide.spec import DeciderSpec
from planner.profile import Profile
from planner.types import QUANTILES, Decision, Forecast, LoadForecast, Observation, PoolObservation, Reason


def what_if_policy(policy: Policy) -> Policy:
    """A what-if has no history: no stabilisation or rate limits, only floors, ceilings and the budget."""
    free = ScalingRules(stabilization_window_s=0, policies=[])
    return policy.model_copy(update={"behavior": Behavior(tolerance=0.0, scale_up=free, scale_down=free)})


def flat_forecast(value: float, horizon_s: float) -> Forecast:
    """A forecast that is certain: every quantile is ``value``."""
    return Forecast(value, {q: value for q in QUANTILES}, horizon_s, "given")


def what_if_inputs(policy: Policy, rate_rps: float, isl: float, osl: float) -> tuple[Observation, LoadForecast]:
    """The one observation (taken at 0) and the certain forecast a what-if decides from."""
    horizon = policy.startup_s + policy.interval_s
    window = policy.interval_s
    pool = PoolObservation(requests=rate_rps * window, rate_rps=rate_rps, isl_mean=isl, osl_mean=osl)
    obs = Observation(at_s=0.0, window_s=window, pools={n: pool for n in policy.pool_names()})
    forecast = LoadForecast(flat_forecast(rate_rps, horizon), flat_forecast(isl, horizon), flat_forecast(osl, horizon))
    return obs, forecast


def plan(policy: Policy, profile: Profile, rate_rps: float, isl: float, osl: float) -> Decision:
    """The Decision for ``rate_rps`` requests/s of mean ``isl`` input and ``osl`` output tokens."""
    policy = what_if_policy(policy)
    obs, forecast = what_if_inputs(policy, rate_rps, isl, osl)
    # One observation, taken now: it cannot be stale.
    decision, _ = decide(DeciderSpec.build(policy, profile, stale_after_s=math.inf), obs, forecast, None, 0.0)
    return decision


@dataclass(frozen=True)
class SlaMiss:
    """A pool held below what the SLA asks by its ceiling or the GPU budget, and what that costs."""

    pool: str
    signal: str  # "ttft" | "itl"
    predicted_ms: float | None  # None: unbounded, the pool is over capacity and its queue grows
    target_ms: float
    replicas: int
    needed: int  # replicas the SLA model asked for
    capped_by: str  # "ceiling" | "budget" | "fleet_priority" | "fleet_wake" | "fleet_share"

    def describe(self, policy: Policy) -> str:
        predicted = ("unbounded: queue grows" if self.predicted_ms is None
                     else f"{self.predicted_ms:,.1f} ms")
        limit = (f"its ceiling (pools.{self.pool}.max_replicas)" if self.capped_by == Reason.CEILING
                 else f"the fleet's GPU budget ({self.capped_by})" if self.capped_by.startswith("fleet_")
                 else f"the GPU budget (budget.max_gpus {policy.budget.max_gpus})")
        return (f"{self.pool}: {self.needed} replicas needed, {self.replicas} allowed by {limit}; predicted "
                f"{self.signal.upper()} p{policy.sla.percentile:g} at {self.replicas}: {predicted} "
                f"(target {self.target_ms:g} ms)")


def sla_misses(policy: Policy, decision: Decision) -> list[SlaMiss]:
    """Each pool that a ceiling or the budget holds below its SLA size and whose predicted latency at the
    capped size misses the target (a pool capped but still within the SLA is no miss)."""
    mode = policy.mode
    misses = []
    for name, pd in decision.pools.items():
        cap = next((r for r in (Reason.BUDGET, Reason.CEILING, Reason.FLEET_PRIORITY, Reason.FLEET_WAKE,
                                 Reason.FLEET_SHARE)
                    if r in pd.reasons), None)
        if cap is None or pd.replicas >= math.ceil(pd.desired_unclamped - 1e-9):
            continue
        checks = [("ttft", pd.predicted_ttft_ms, policy.sla.ttft_ms, name == mode.ttft_pool),
                  ("itl", pd.predicted_itl_ms, policy.sla.itl_ms, name == mode.itl_pool)]
        for signal, predicted, target, sets_it in checks:
            if sets_it and (predicted is None or predicted > target):
                misses.append(SlaMiss(name, signal, predicted, target, pd.replicas,
                                      math.ceil(pd.desired_unclamped - 1e-9), cap.value))
    return misses
