"""Stage 3 of the decision: the replicas each pool needs for its demand, before any behaviour or limit.

Prefill: the smallest pool whose TTFT percentile (queueing + compute + KV transfer + first decode step)
meets the target; decode: the smallest pool whose batch at the percentile's concurrency meets the ITL target
and fits the KV cache, the sequences it runs now beyond what its ready replicas hold at that batch counted as
a backlog (reason decode_over_batch; capacity.held_over_target says why); aggregated: one pool against both
(planner/decide/capacity.py has the models). The percentile is the SLA's, or the stricter one the demand carries
while the error budget recovers (decide/error_budget.py ``sizing_percentile``).
"""

from __future__ import annotations

from planner.decide.calibration import Factors
from planner.decide.capacity import Sizing, size_aggregated, size_decode, size_prefill
from planner.decide.demand import Demand
from planner.decide.spec import DeciderSpec
from planner.types import Mode, Pool


def size_pools(spec: DeciderSpec, demand: Demand, factors: Factors) -> dict[Pool, Sizing]:
    model = spec.model if demand.percentile is None else spec.model.at_percentile(demand.percentile)
    if spec.mode is Mode.AGGREGATED:
        return {Pool.AGGREGATED: size_aggregated(model, demand.load, factors.ttft, factors.itl,
                                                 mix=demand.isl_mix)}
    return {Pool.PREFILL: size_prefill(model, demand.prefill, factors.ttft, mix=demand.isl_mix),
            Pool.DECODE: size_decode(model, demand.decode, factors.itl, mix=demand.isl_mix,
                                     held=(*demand.decode_held, spec.horizon_s))}
