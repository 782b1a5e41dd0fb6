"""The offline schedule: an achievable schedule that knows the whole future, verified by full simulation.

Method (written into every report):
1. A schedule is a replica target per pool on a grid of ``grid_s`` seconds, asked for at each grid time
   exactly as a controller would ask (new replicas take ``startup_s`` to start, removed ones drain).
2. Every schedule is judged by one continuous simulation of the whole replay (warm-up included, state
   carried from minute to minute, start-up and drain billed) and scored like every policy: request-level
   joint attainment over the scored window and its GPU-hours. Nothing is accepted on an approximation.
3. Seeds: the targets every policy of the run actually asked for (each seed replays to exactly that
   policy's result), plus a uniform raise of the best one when none reaches the SLA percentile. The
   cheapest seed that reaches the percentile is the start.
4. Greedy trimming: cut the targets of the grid cells whose capacity no missed request needed (no miss of
   that pool's kind arrived while it was asked for or starting), by a share that halves after every
   rejected cut; a cut is kept only when the full simulation still meets the percentile and spends less.
   Stops when no cut of one replica is accepted or the simulation budget is spent.
So no policy of the run can both spend less and attain more than the schedule (it started from each of
them), and the schedule is a real, replayable sequence of targets: an upper bound on the optimum, not a
bound below it (the lower bound in the same report is that).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.config import Policy
from planner.profile import Profile
from planner.sim.baselines.common import gpus_per_replica, make_decision
from planner.sim.replay import Replay
from planner.types import Decision, NoData, Observation, Reason

NAME = "offline"
METHOD = ("greedy trim of the cheapest policy schedule meeting the SLA percentile (joint attainment over the "
          "scored window), every candidate judged by one continuous simulation of the whole replay; grid "
          "{grid:g} s, {sims} simulations; an achievable schedule, not a lower bound")
FIRST_CUT = 0.25  # share of a cell's replicas the first trim removes
RAISE = 1.25  # uniform raise when no seed reaches the percentile


@dataclass(frozen=True)
class TargetPlan:
    """Replica targets per pool on a grid: ``targets[pool][i]`` is asked for at ``i * grid_s``."""

    grid_s: float
    targets: dict[str, np.ndarray]

    @property
    def cells(self) -> int:
        return len(next(iter(self.targets.values())))

    def at(self, t_s: float) -> dict[str, int]:
        i = min(self.cells - 1, max(0, int(math.floor(t_s / self.grid_s + 1e-9))))
        return {p: int(v[i]) for p, v in self.targets.items()}

    def replicas_seconds(self, gpus: Mapping[str, int]) -> float:
        return float(sum(v.sum() * gpus[p] for p, v in self.targets.items()) * self.grid_s)


def plan_from_targets(ticks: Sequence[tuple[float, Mapping[str, int]]], initial: Mapping[str, int],
                      grid_s: float, cells: int) -> TargetPlan:
    """The targets in force at each grid time: the latest tick at or before it (``initial`` before any)."""
    times = np.array([t for t, _ in ticks], dtype=np.float64)
    out = {}
    for pool, start in initial.items():
        values = np.array([tg.get(pool, start) for _, tg in ticks], dtype=np.int64)
        grid = np.arange(cells) * grid_s
        idx = np.searchsorted(times, grid + 1e-9, side="right") - 1
        out[pool] = np.where(idx >= 0, values[np.maximum(idx, 0)], start).astype(np.int64)
    return TargetPlan(grid_s, out)


class PlanController:
    """Asks for the plan's targets at each grid time; reads nothing (it knows the future already)."""

    def __init__(self, policy: Policy, profile: Profile, plan: TargetPlan, name: str = NAME) -> None:
        self.name = name
        self.interval_s = plan.grid_s
        self.plan = plan
        self.gpus = gpus_per_replica(policy, profile)

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        t = self.plan.at(now_s)
        return make_decision(now_s, t, self.gpus, reasons={p: (Reason.BASELINE,) for p in t})


@dataclass(frozen=True)
class Judged:
    plan: TargetPlan
    attainment: float
    gpu_hours: float
    replay: Replay


@dataclass(frozen=True)
class OfflineSchedule:
    plan: TargetPlan
    replay: Replay
    attainment: float
    gpu_hours: float
    simulations: int
    seeded_from: str
    method: str

    def peak(self, from_s: float = 0.0) -> dict[str, int]:
        first = int(math.floor(from_s / self.plan.grid_s))
        return {p: int(v[first:].max() if len(v[first:]) else v.max()) for p, v in self.plan.targets.items()}
