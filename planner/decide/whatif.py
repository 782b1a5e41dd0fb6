"""What-if sizing (``planner plan``): the Decision for a steady, given load, with no history and no state.

The load is turned into a synthetic observation (one window of ``rate_rps``) and a flat forecast (every
quantile equal to the given value), and ``decide`` does the rest, so a what-if answer and a control tick at
that steady load size the pools alike except for behaviour: a what-if has nothing to stabilise against.
"""

from __future__ import annotations

from planner.config import Behavior, Policy, ScalingRules
from planner.decide.decider import decide
from planner.decide.spec import DeciderSpec
from planner.profile import Profile
from planner.types import QUANTILES, Decision, Forecast, LoadForecast, Observation, PoolObservation


def what_if_policy(policy: Policy) -> Policy:
    """A what-if has no history: no stabilisation or rate limits, only floors, ceilings and the budget."""
    free = ScalingRules(stabilization_window_s=0, policies=[])
    return policy.model_copy(update={"behavior": Behavior(tolerance=0.0, scale_up=free, scale_down=free)})


def flat_forecast(value: float, horizon_s: float) -> Forecast:
    """A forecast that is certain: every quantile is ``value``."""
    return Forecast(value, {q: value for q in QUANTILES}, horizon_s, "given")


def plan(policy: Policy, profile: Profile, rate_rps: float, isl: float, osl: float) -> Decision:
    """The Decision for ``rate_rps`` requests/s of mean ``isl`` input and ``osl`` output tokens."""
    policy = what_if_policy(policy)
    horizon = policy.startup_s + policy.interval_s
    window = policy.interval_s
    pool = PoolObservation(requests=rate_rps * window, rate_rps=rate_rps, isl_mean=isl, osl_mean=osl)
    obs = Observation(at_s=0.0, window_s=window, pools={n: pool for n in policy.pool_names()})
    forecast = LoadForecast(flat_forecast(rate_rps, horizon), flat_forecast(isl, horizon), flat_forecast(osl, horizon))
    decision, _ = decide(DeciderSpec.build(policy, profile), obs, forecast, None, 0.0)
    return decision
