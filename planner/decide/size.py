"""Stage 3 of the decision: the replicas each pool needs for its demand, before any behaviour or limit.

Prefill: the smallest pool whose TTFT percentile (queueing + compute + KV transfer + first decode step)
meets the target; decode: the smallest pool whose batch at the percentile's concurrency meets the ITL target
and fits the KV cache, the sequences it runs now beyond what its ready replicas hold at that batch counted as
a backlog (reason decode_over_batch; capacity.held_over_target says why); aggregated: one pool against both
(planner/decide/capacity.py has the models). The percentile is the SLA's, or the stricter one the demand carries
while the error budget recovers (decide/error_budget.py ``sizing_percentile``).
"""

from __future__ import annotations

from dataclasses import replace

from planner.decide.calibration import Factors
from planner.decide.capacity import (
    Sizing,
    decode_itl_ms,
    kv_replicas,
    size_aggregated,
    size_decode,
    size_prefill,
)
from planner.decide.demand import Demand
from planner.decide.spec import DeciderSpec
from planner.types import Mode, Pool, Reason


def size_pools(spec: DeciderSpec, demand: Demand, factors: Factors) -> dict[Pool, Sizing]:
    model = spec.model if demand.percentile is None else spec.model.at_percentile(demand.percentile)
    if spec.mode is Mode.AGGREGATED:
        return {Pool.AGGREGATED: size_aggregated(model, demand.load, factors.ttft, factors.itl,
                                                 mix=demand.isl_mix)}
    held = (*demand.decode_held, spec.horizon_s)
    decode = size_decode(model, demand.decode, factors.itl, mix=demand.isl_mix, held=held)
    if demand.decode_kv is not None:
        # The KV guard: while the pools lean, decode's KV still holds the batch of forecast.quantile's load. A
        # decode pool a replica short of its ITL target runs slower steps; one short of KV admits nothing, and
        # every prefilled request waits for whole sequences to finish (config.py, sla.lean_decode).
        need = kv_replicas(model, demand.decode_kv, factors.itl, demand.isl_mix, held)
        if need > decode.replicas:
            decode = replace(decode, desired=float(need), replicas=need,
                             predicted_ms=decode_itl_ms(model, demand.decode, need, factors.itl, demand.isl_mix),
                             reasons=(*decode.reasons, Reason.DECODE_KV_GUARD))
    return {Pool.PREFILL: size_prefill(model, demand.prefill, factors.ttft, mix=demand.isl_mix),
            Pool.DECODE: decode}
