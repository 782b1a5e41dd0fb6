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


def fit_budget(asked: Mapping[str, int], gpus_per_replica: Mapping[str, int], floors: Mapping[str, int],
               max_gpus: int | None, pressure: Callable[[str, int], float]) -> tuple[dict[str, int], set[str]]:
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

        def key(p: str) -> tuple[float, float, str]:
            value = pressure(p, alloc[p])
            value = value if math.isfinite(value) else 1e18
            return (value, (asked[p] - alloc[p]) / max(1, asked[p]), p)

        pick = max(open_pools, key=key)
        alloc[pick] += 1
        left -= gpus_per_replica[pick]
    return alloc, {p for p in asked if alloc[p] < asked[p]}
