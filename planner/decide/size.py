"""Stage 3 of the decision: the replicas each pool needs for its demand, before any behaviour or limit.

Prefill: the smallest pool whose TTFT percentile (queueing + compute + KV transfer + first decode step)
meets the target; decode: the smallest pool whose batch at the percentile's concurrency meets the ITL target
and fits the KV cache, the sequences it runs now beyond what its ready replicas hold at that batch counted as
a backlog (reason decode_over_batch; capacity.held_over_target says why); aggregated: one pool against both
(planner/decide/capacity.py has the models).
"""

from __future__ import annotations

from dataclasses import replace

from planner.decide.calibration import Factors
from planner.decide.capacity import Sizing, held_over_target, size_aggregated, size_decode, size_prefill
from planner.decide.demand import Demand
from planner.decide.spec import DeciderSpec
from planner.types import Mode, Pool, Reason


def size_pools(spec: DeciderSpec, demand: Demand, factors: Factors) -> dict[Pool, Sizing]:
    if spec.mode is Mode.AGGREGATED:
        return {Pool.AGGREGATED: size_aggregated(spec.model, demand.load, factors.ttft, factors.itl,
                                                 mix=demand.isl_mix)}
    running, ready = demand.decode_held
    decode_load, excess = held_over_target(spec.model, demand.decode, running, ready, spec.horizon_s, factors.itl,
                                           demand.isl_mix)
    decode = size_decode(spec.model, decode_load, factors.itl, mix=demand.isl_mix)
    if excess > 0:
        decode = replace(decode, reasons=(*decode.reasons, Reason.DECODE_OVER_BATCH))
    return {Pool.PREFILL: size_prefill(spec.model, demand.prefill, factors.ttft, mix=demand.isl_mix),
            Pool.DECODE: decode}
