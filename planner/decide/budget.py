"""GPU budget: when the pools together ask for more GPUs than ``budget.max_gpus``, split what there is by SLA
pressure.

Floors come first (they are a promise to the operator). Each remaining replica goes to the pool whose
predicted latency is furthest above its target at its current allocation, i.e. the pool that would violate
its SLA worst; a pool never gets more than it asked for. Example: 10 GPUs, prefill (1 GPU each) asks 6,
decode (2 GPUs each) asks 4: with 2 prefill + 2 decode allocated the prefill TTFT is predicted at 3x its
target and the decode ITL at 1.5x, so the next GPU goes to prefill.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

from planner.decide.calibration import Factors
from planner.decide.capacity import (
    aggregated_latency_ms,
    decode_itl_ms,
    prefill_ttft_ms,
    prefill_ttft_table_ms,
)
from planner.decide.demand import Demand
from planner.decide.spec import DeciderSpec
from planner.types import Pool

K = TypeVar("K", bound=str)


def fit_budget(asked: Mapping[K, int], gpus_per_replica: Mapping[K, int], floors: Mapping[K, int],
               max_gpus: int | None, pressure: Callable[[K, int], float]) -> tuple[dict[K, int], set[K]]:
    """Allocation within ``max_gpus`` and the pools that got less than they asked for."""
    total = sum(asked[p] * gpus_per_replica[p] for p in asked)
    if max_gpus is None or total <= max_gpus:
        return dict(asked), set()
    alloc = {p: min(asked[p], floors.get(p, 0)) for p in asked}
    left = max_gpus - sum(alloc[p] * gpus_per_replica[p] for p in asked)
    while True:
        open_pools = [p for p in asked if alloc[p] < asked[p] and gpus_per_replica[p] <= left]
        if not open_pools:
            break

        def key(p: K) -> tuple[float, float, str]:
            value = pressure(p, alloc[p])
            value = value if math.isfinite(value) else 1e18
            return (value, (asked[p] - alloc[p]) / max(1, asked[p]), p)

        pick = max(open_pools, key=key)
        alloc[pick] += 1
        left -= gpus_per_replica[pick]
    return alloc, {p for p in asked if alloc[p] < asked[p]}


# ----------------------------------------------------------------------------------- stage 5 of decide()
def sla_pressure(spec: DeciderSpec, demand: Demand, factors: Factors,
                 asked: Mapping[Pool, int]) -> Callable[[Pool, int], float]:
    """Predicted latency / target for ``pool`` at ``c`` replicas (> 1: the pool would miss its SLA).

    Evaluated only when the budget binds; each (pool, c) once, and the prefill pool's table in one O(c) pass.
    """
    model = spec.model
    prefill_table: list[float] = []
    seen: dict[tuple[Pool, int], float] = {}

    def compute(pool: Pool, c: int) -> float:
        if pool is Pool.AGGREGATED:
            ttft, itl = aggregated_latency_ms(model, demand.load, c, factors.ttft, factors.itl, demand.isl_mix)
            return max(ttft / model.ttft_target_ms, itl / model.itl_target_ms)
        if pool is Pool.PREFILL and demand.isl_mix is not None:  # per size asked (the table is O(c) each)
            return prefill_ttft_ms(model, demand.prefill, c, factors.ttft, demand.isl_mix) / model.ttft_target_ms
        if pool is Pool.PREFILL:
            if not prefill_table:
                prefill_table.extend(prefill_ttft_table_ms(model, demand.prefill, max(1, asked[Pool.PREFILL]),
                                                           factors.ttft))
            return prefill_table[min(c, len(prefill_table) - 1)] / model.ttft_target_ms
        return decode_itl_ms(model, demand.decode, c, factors.itl, demand.isl_mix) / model.itl_target_ms

    def pressure(pool: Pool, c: int) -> float:
        if (pool, c) not in seen:
            seen[(pool, c)] = compute(pool, c)
        return seen[(pool, c)]

    return pressure


def apply_budget(spec: DeciderSpec, asked: Mapping[Pool, int], demand: Demand,
                 factors: Factors) -> tuple[dict[Pool, int], set[Pool]]:
    """The replicas within ``budget.max_gpus`` (unchanged when it does not bind) and the pools it cut."""
    policy = spec.policy
    floors = {p: policy.pool(p).min_replicas for p in asked}
    gpus = {p: spec.gpus(p) for p in asked}
    return fit_budget(asked, gpus, floors, policy.budget.max_gpus, sla_pressure(spec, demand, factors, asked))
