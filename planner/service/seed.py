"""Seeding a controller from what the targets hold, so a restart or failover is not a scale-down.

A fresh controller knows nothing of the pools: the behaviour rules would take "current" from the ready
replicas it sees (fewer than the targets hold whenever pods are pending or loading a model) and start with
an empty scale-down window, and the first tick could cut a pool of 5 to 1. Seeded, each pool starts at the
target's ``spec.replicas`` with that size in its recommendation history at the seed time, so the scale-down
window starts full at that size: a scale-down must persist for ``stabilization_window_s`` from the first
tick, exactly as if the controller had been running, and the rate limits apply from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from planner.decide.state import PlannerState, PoolMemory
from planner.types import Observation, Pool


def seeded_state(state: PlannerState | None, replicas: Mapping[str, int], at_s: float) -> PlannerState:
    """``state`` (calibration kept) with every pool in ``replicas`` at that size and a full window."""
    base = state or PlannerState()
    pools = dict(base.pools)
    for pool, n in replicas.items():
        pools[Pool(pool)] = PoolMemory(target=int(n), recommendations=((float(at_s), int(n)),))
    return replace(base, pools=pools)


def ready_replicas(observation: Observation, pools: tuple[str, ...]) -> dict[str, int] | None:
    """The ready replicas of every pool, or None when one of them is unknown."""
    out: dict[str, int] = {}
    for pool in pools:
        o = observation.pools.get(pool)
        if o is None or o.ready_replicas is None:
            return None
        out[pool] = int(o.ready_replicas)
    return out
