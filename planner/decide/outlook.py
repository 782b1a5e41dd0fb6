"""What ``decide()`` knew at a tick, kept to price sizes it did not choose (the fleet stage).

The fleet stage (decide/fleet.py) fits every policy's decision into one GPU budget; to share GPUs between
policies of equal priority it needs, per pool, what the SLA suffers at fewer replicas than the decision
asked for. ``outlook`` rebuilds the tick's demand and calibration factors from the same inputs ``decide``
had (pure: the same inputs give the same numbers) and answers the sizing model's prediction at any size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.decide.calibration import Factors, calibrate
from planner.decide.capacity import aggregated_latency_ms, decode_itl_ms, prefill_ttft_ms
from planner.decide.demand import Demand, Hold, check_data, demand
from planner.decide.spec import DeciderSpec
from planner.decide.state import PlannerState
from planner.types import LoadForecast, NoData, Observation, Pool


@dataclass(frozen=True)
class Outlook:
    spec: DeciderSpec
    demand: Demand
    factors: Factors

    def predicted(self, pool: Pool, replicas: int) -> tuple[float | None, float | None]:
        """(TTFT, ITL) in ms the model predicts for ``pool`` at ``replicas`` (None: the pool does not set it)."""
        model, dem, f = self.spec.model, self.demand, self.factors
        if replicas <= 0:
            return (math.inf, None) if pool is Pool.PREFILL else (None, math.inf) if pool is Pool.DECODE \
                else (math.inf, math.inf)
        if pool is Pool.AGGREGATED:
            return aggregated_latency_ms(model, dem.load, replicas, f.ttft, f.itl, dem.isl_mix)
        if pool is Pool.PREFILL:
            return prefill_ttft_ms(model, dem.prefill, replicas, f.ttft, dem.isl_mix), None
        return None, decode_itl_ms(model, dem.decode, replicas, f.itl, dem.isl_mix)

    def pressure(self, pool: Pool, replicas: int) -> float:
        """Predicted latency over its target at ``replicas`` (> 1: the pool misses its SLA; inf: its queue
        grows without bound). The larger of TTFT and ITL for an aggregated pool."""
        if replicas <= 0 and self.demand.zero:
            return 0.0  # no traffic: a pool at zero misses nothing
        ttft, itl = self.predicted(pool, replicas)
        ratios = [v / t for v, t in ((ttft, self.spec.model.ttft_target_ms), (itl, self.spec.model.itl_target_ms))
                  if v is not None]
        worst = max(ratios)
        return worst if math.isfinite(worst) else math.inf


def outlook(spec: DeciderSpec, observation: Observation | NoData, forecast: LoadForecast | None,
            state: PlannerState | None, now_s: float) -> Outlook | None:
    """The tick's outlook from the inputs ``decide`` was given (``state``: the one before that call); None when
    ``decide`` held (no data, stale, no forecast to size from): there is nothing to price with."""
    obs = check_data(spec, observation, now_s)
    if isinstance(obs, Hold):
        return None
    dem = demand(spec, obs, forecast)
    if isinstance(dem, Hold):
        return None
    factors, _ = calibrate(spec, obs, state or PlannerState(), now_s)
    return Outlook(spec, dem, factors)
