"""What ``decide()`` knew at a tick, kept to price sizes it did not choose (the fleet stage).

The fleet stage (decide/fleet.py) fits every policy's decision into one GPU budget; to share GPUs between
policies of equal priority it needs, per pool, what the SLA suffers at fewer replicas than the decision
asked for, and how much of the load each size carries within the SLA (the policy's SLA frontier: its pools
grown together in the proportion that keeps its SLA). ``outlook`` rebuilds the tick's demand and calibration factors from the same inputs ``decide``
had (pure: the same inputs give the same numbers) and answers the sizing model's prediction at any size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.decide.calibration import Factors, calibrate
from planner.decide.capacity import (
    aggregated_latency_ms,
    decode_itl_ms,
    prefill_ttft_ms,
    size_decode,
    size_prefill,
)
from planner.decide.demand import Demand, Hold, check_data, demand
from planner.decide.spec import DeciderSpec
from planner.decide.state import PlannerState
from planner.types import LoadForecast, NoData, Observation, Pool

FRONTIER_GRID = 16  # shares of the load a pool is sized at to draw the frontier (32 sizings per policy)


@dataclass(frozen=True)
class Outlook:
    spec: DeciderSpec
    demand: Demand
    factors: Factors
    waiting: int = 0  # requests held at the router for want of a replica (Observation.waiting)

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
        if replicas <= 0 and self.demand.zero and not self.waiting:
            return 0.0  # no traffic: a pool at zero misses nothing (requests held at the router are traffic)
        ttft, itl = self.predicted(pool, replicas)
        ratios = [v / t for v, t in ((ttft, self.spec.model.ttft_target_ms), (itl, self.spec.model.itl_target_ms))
                  if v is not None]
        worst = max(ratios)
        return worst if math.isfinite(worst) else math.inf

    def carries(self, pool: Pool, lowest: int, highest: int, grid: int = FRONTIER_GRID) -> tuple[float, ...]:
        """For ``lowest`` .. ``highest`` replicas of ``pool`` (prefill or decode), the share of the tick's load
        each carries within the SLA: strictly increasing, 0 at zero replicas.

        The pool is sized (as ``decide`` sizes it) at ``grid`` shares of the load, 1/grid .. 1; between two
        shares the replicas added are spread evenly, and past the full load each replica carries
        1/(replicas at the full load) more. A count carries the share where it stops sufficing."""
        needs = [0] + [self._needed(pool, k / grid) for k in range(1, grid + 1)]
        full = max(1, needs[-1])
        out: list[float] = []
        for c in range(lowest, highest + 1):
            if c <= 0:
                share = 0.0
            elif c >= needs[-1]:
                share = 1.0 + (c + 1 - needs[-1]) / full
            else:
                k = max(i for i, n in enumerate(needs) if n <= c)  # c suffices up to share k/grid, not at k+1
                added = needs[k + 1] - needs[k]
                share = (k + (c + 1 - needs[k]) / added) / grid
            out.append(share if not out else max(share, out[-1] + 1e-9))
        return tuple(out)

    def _needed(self, pool: Pool, share: float) -> int:
        model, dem, f = self.spec.model, self.demand, self.factors
        if pool is Pool.PREFILL:
            load = replace(dem.prefill, rate_rps=dem.prefill.rate_rps * share)
            return size_prefill(model, load, f.ttft, mix=dem.isl_mix).replicas
        if pool is Pool.DECODE:
            load = replace(dem.decode, rate_rps=dem.decode.rate_rps * share)
            return size_decode(model, load, f.itl, mix=dem.isl_mix).replicas
        raise ValueError(f"carries: {pool.value} has no frontier of its own (one pool per policy)")


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
    return Outlook(spec, dem, factors, obs.waiting)
