"""Replay a fleet: one simulated cluster per policy, one trace each, the fleet stage between them.

Every ``fleet.interval_s`` each policy's planner reads its own cluster's metrics and decides, the fleet stage
(planner/fleet.py over decide/fleet.py, exactly what ``planner run --fleet`` runs) fits the decisions into the
budget, and the grants are applied, the policies that give GPUs back first. ``max_gpus=None`` replays the
same planners with no shared budget (each policy alone), the comparison a fleet report carries.

Each policy's replay is an ordinary ``Replay`` (scored by scoring.summarise like any backtest), and the fleet
keeps its own timeline: GPUs billed per policy (starting, ready and draining replicas) and granted, per
sample. The fleet starts from each policy's warm fluid estimate (backtest.fluid_initial), fitted into the
budget by the same stage.

Scale to zero: a request that arrives for a policy whose every pool is at zero wakes it at once, as the router's
wake signal does live (`planner route --wake-url`, ``POST /v1/wake``): the fleet ticks at that moment, off its
grid (the grid goes on where it was; only the woken policy decides, the others keep their grants), and the
request waits at the router (the pool's pending queue) until a
replica is ready, at most ``hold_timeout_s`` (`planner route --hold-timeout-s`'s default); past it the request
fails, counted like any failure, as does one that arrives while ``hold_queue`` are held (`--hold-queue`). The
wait is in its TTFT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from planner.controller import PlannerController, make_planner_controller
from planner.decide.fleet import PolicyAsk, PoolAsk, fit_fleet
from planner.decide.spec import DeciderSpec
from planner.fleet import FleetPlanner, FleetTick
from planner.fleet_file import Fleet
from planner.router.defaults import HOLD_QUEUE, HOLD_TIMEOUT_S
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.cluster.metrics import SimActuator, SimMetricSource
from planner.sim.evaluate.backtest import sim_setup
from planner.sim.evaluate.replay import Replay, _sample, finished_replay, wake_at
from planner.sim.traces.records import RequestTrace
from planner.types import Decision

NO_BUDGET = 10**9  # "no shared budget": every policy gets what it decides


@dataclass(frozen=True)
class FleetReplay:
    name: str  # "fleet" (shared budget) or "unshared"
    budget_gpus: int | None
    replays: dict[str, Replay]
    timeline: list[dict[str, float]]  # t_s, gpus (billed, all policies), granted, and per policy
    ticks: list[dict]  # FleetTick.summary() of each tick where the budget bound
    clamped_ticks: dict[str, int]  # per policy, ticks it was granted less than it decided
    replica_starts: int  # replicas added over the run (every policy, every pool)
    cold_starts: int  # policies woken from zero replicas (every pool at zero, then one with a replica)
    score_from_s: float = 0.0  # the warm-up before it is not scored (nor counted above)
    asleep: dict[str, list[tuple[float, float]]] | None = None  # per policy (went to zero at, woke at) each time
    clamped_by: dict[str, dict[str, int]] | None = None  # per policy, its clamped ticks by the fleet's reason

    def cold_ttft_ms(self, name: str, startup_s: float) -> list[float]:
        """TTFTs (ms; failed requests as inf) of the requests that met a cold start: those that arrived while the
        policy was at zero, or before the replicas it woke had started."""
        rep = self.replays[name]
        arrival, ttft, failed = rep.results["arrival_s"], rep.results["ttft_s"], rep.results["failed"]
        hit = np.zeros(len(arrival), dtype=bool)  # each request once, where spans overlap (slept again while starting)
        for slept, woke in (self.asleep or {}).get(name, []):
            hit |= (arrival >= slept) & (arrival < woke + startup_s)
        hit &= arrival >= self.score_from_s
        return [math.inf if f else float(x) * 1e3 for x, f in zip(ttft[hit], failed[hit], strict=True)]

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.replays.values())

    @property
    def max_gpus_used(self) -> float:
        return max((row["gpus"] for row in self.timeline if row["t_s"] >= self.score_from_s), default=0.0)

    @property
    def max_gpus_serving(self) -> float:
        """The most GPUs held at once by replicas not draining (starting or ready): within the budget."""
        return max((row["gpus"] - row.get("draining_gpus", 0.0) for row in self.timeline
                    if row["t_s"] >= self.score_from_s), default=0.0)

    @property
    def max_gpus_granted(self) -> float:
        return max((row["granted_gpus"] for row in self.timeline if row["t_s"] >= self.score_from_s), default=0.0)


def fleet_replay(fleet: Fleet, traces: Mapping[str, RequestTrace], *, shared: bool = True,
                 startup_s: float | None = None, kill: bool = False, sample_s: float = 30.0, warmup_s: float = 0.0,
                 progress: Callable[[str, float, float], None] | None = None, wake: bool = True,
                 hold_timeout_s: float | None = HOLD_TIMEOUT_S, hold_queue: int | None = HOLD_QUEUE) -> FleetReplay:
    """Replay ``traces`` (one per policy, by name) under the fleet's planners; ``shared=False``: no budget;
    the first ``warmup_s`` run unscored (the planners gather history). ``wake``: a request for a policy at zero
    ticks the fleet at once (False: at the next grid point, as without the router's signal)."""
    budget = fleet.max_gpus if shared else NO_BUDGET
    setups = {}
    for m in fleet.members:
        ctx, cfg = sim_setup(traces[m.name], m.profile, m.policy, startup_s=startup_s, kill=kill)
        setups[m.name] = (ctx, replace(cfg, hold_timeout_s=hold_timeout_s, hold_queue=hold_queue))
    initial = _fitted_initial(fleet, {n: dict(ctx.initial) for n, (ctx, _) in setups.items()}, budget)
    planner = FleetPlanner(fleet, _controllers(fleet, initial, warmup_s), max_gpus=budget)
    clusters = {n: Cluster(traces[n], fleet.member(n).profile, cfg, initial[n]) for n, (_, cfg) in setups.items()}
    sources = {n: SimMetricSource(c) for n, c in clusters.items()}
    actuators = {n: SimActuator(c) for n, c in clusters.items()}
    windows = {n: ctx.window_s for n, (ctx, _) in setups.items()}
    configs: dict[str, SimConfig] = {n: cfg for n, (_, cfg) in setups.items()}
    last_arrival = max(float(t.arrival_s[-1]) if len(t) else 0.0 for t in traces.values())
    horizon = last_arrival + max(c.tail_s for c in configs.values())
    interval = fleet.interval_s
    per_replica = {n: _gpus_per_replica(fleet, n) for n in clusters}
    book = _Ledger(initial, warmup_s)
    timelines: dict[str, list[dict[str, float]]] = {n: [] for n in clusters}
    fleet_rows: list[dict[str, float]] = []
    next_tick, next_sample, last_progress = interval, 0.0, -math.inf
    signalled: dict[str, float] = dict.fromkeys(clusters, -math.inf)  # the router's last wake signal per policy

    def fleet_tick(t: float, only: set[str] | None = None) -> None:
        reads = {n: sources[n].read(windows[n], t) for n in (clusters if only is None else only)}
        book.record(planner.tick(reads, t, only, sum(c.draining_gpus() for c in clusters.values())), t, actuators)

    while True:
        wake_s, waking = _next_wake(clusters, book.slept_at, signalled) if wake else (math.inf, None)
        t = min(next_tick, next_sample, wake_s)
        for c in clusters.values():
            c.run_until(t)
        if t == next_sample:
            fleet_rows.append(_fleet_row(t, clusters, timelines, sources, sample_s, book.decisions, book.granted,
                                         per_replica))
            next_sample += sample_s
        if t == next_tick:
            fleet_tick(t)
            next_tick += interval
        elif t == wake_s and waking is not None:
            signalled[waking] = t
            if clusters[waking].held():  # a request arrived (or still waits) for it: it decides now, the
                fleet_tick(t, {waking})     # others keep their grants until the grid
        if progress is not None and t - last_progress >= 60.0:
            progress("fleet" if shared else "unshared", min(t, last_arrival), last_arrival)
            last_progress = t
        if (all(c.finished for c in clusters.values()) and t >= last_arrival) or t >= horizon:
            break
    replays = {n: finished_replay(n, c, actuators[n], timelines[n], book.targets[n], book.decisions[n], traces[n],
                                  warmup_s) for n, c in clusters.items()}
    return FleetReplay("fleet" if shared else "unshared", budget if shared else None, replays, fleet_rows,
                       book.ticks, book.clamped, book.starts, book.cold, warmup_s, book.asleep, book.clamped_by)


class _Ledger:
    """What each fleet tick applied, per policy: the grants, decisions and targets, the ticks where the budget
    bound, clamps, replica starts and wakes from zero (scored after ``warmup_s``), and the spans asleep."""

    def __init__(self, initial: Mapping[str, dict[str, int]], warmup_s: float) -> None:
        self.warmup_s = warmup_s
        self.granted: dict[str, dict[str, int]] = {n: dict(v) for n, v in initial.items()}
        self.decisions: dict[str, list[Decision]] = {n: [] for n in initial}
        self.targets: dict[str, list[tuple[float, dict[str, int]]]] = {n: [] for n in initial}
        self.ticks: list[dict] = []
        self.clamped = dict.fromkeys(initial, 0)
        self.clamped_by: dict[str, dict[str, int]] = {n: {} for n in initial}
        self.starts, self.cold = 0, 0
        self.asleep: dict[str, list[tuple[float, float]]] = {n: [] for n in initial}
        self.slept_at: dict[str, float | None] = {n: (0.0 if not any(v > 0 for v in initial[n].values()) else None)
                                                  for n in initial}

    def record(self, tick: FleetTick, t: float, actuators: Mapping[str, SimActuator]) -> None:
        """Apply ``tick``'s grants at ``t`` and account for them."""
        scored = t >= self.warmup_s
        for name in tick.applied():
            d = tick.granted[name]
            new = d.targets()
            self.starts += scored * sum(max(0, n - self.granted[name].get(p, 0)) for p, n in new.items())
            actuators[name].apply(new)
            awake = any(n > 0 for n in new.values())
            if not awake and self.slept_at[name] is None:
                self.slept_at[name] = t
            elif awake and (slept := self.slept_at[name]) is not None:
                self.asleep[name].append((slept, t))
                self.slept_at[name] = None
                self.cold += scored
            self.granted[name] = {**self.granted[name], **new}
            self.decisions[name].append(d)
            self.targets[name].append((t, dict(new)))
            why = tick.fit.reason(name)
            if why is not None and scored:
                self.clamped[name] += 1
                self.clamped_by[name][why.value] = self.clamped_by[name].get(why.value, 0) + 1
        if tick.fit.binds and scored:
            self.ticks.append(tick.summary())


def _next_wake(clusters: Mapping[str, Cluster], slept_at: Mapping[str, float | None],
               signalled: Mapping[str, float]) -> tuple[float, str | None]:
    """The policy the router signals next, and when (replay.wake_at for each)."""
    best: tuple[float, str | None] = (math.inf, None)
    for name, c in clusters.items():
        at = wake_at(c, slept_at[name], signalled[name])
        if at < best[0]:
            best = (at, name)
    return best


def _fitted_initial(fleet: Fleet, initial: Mapping[str, dict[str, int]], budget: int) -> dict[str, dict[str, int]]:
    """Each policy's warm start, fitted into the budget as a tick's decisions would be (unpriced: by share)."""
    asks = []
    for m in fleet.members:
        gpus = _gpus_per_replica(fleet, m.name)
        pools = {p: PoolAsk(max(n, m.policy.pool(p).min_replicas), gpus[p], m.policy.pool(p).min_replicas)
                 for p, n in initial[m.name].items()}
        asks.append(PolicyAsk(m.name, m.priority, pools))
    fit = fit_fleet(asks, budget)
    return {n: dict(v) for n, v in fit.granted.items()}


def _gpus_per_replica(fleet: Fleet, name: str) -> dict[str, int]:
    m = fleet.member(name)
    spec = DeciderSpec.build(m.policy, m.profile, m.policy.stale_after_s)
    return {p: spec.gpus(p) for p in m.policy.pool_names()}


def _controllers(fleet: Fleet, initial: Mapping[str, Mapping[str, int]], warmup_s: float
                 ) -> dict[str, PlannerController]:
    """Each policy's planner, promising its SLA over the scored window as replay() sets it for a single policy
    (the warm-up's transient is not spent from its error budget)."""
    out = {m.name: make_planner_controller(m.policy, m.profile, None, dict(initial[m.name])) for m in fleet.members}
    for own in out.values():
        own.budget_since_s = warmup_s
    return out


def _fleet_row(t: float, clusters: Mapping[str, Cluster], timelines: dict[str, list[dict[str, float]]],
               sources: Mapping[str, SimMetricSource], sample_s: float, decisions: Mapping[str, list[Decision]],
               granted: Mapping[str, Mapping[str, int]], per_replica: Mapping[str, Mapping[str, int]]
               ) -> dict[str, float]:
    # gpus: billed (starting, ready, draining); draining_gpus: of those, replicas on their way out, whose GPUs a
    # tick may already have granted to another policy (GPUs given back are granted in the same tick; live, the
    # new pod stays Pending until they are free), so gpus - draining_gpus stays within the budget.
    row: dict[str, float] = {"t_s": t, "gpus": 0.0, "granted_gpus": 0.0,
                             "draining_gpus": float(sum(c.draining_gpus() for c in clusters.values()))}
    for name, cluster in clusters.items():
        own = _sample(cluster, sources[name], t, sample_s, decisions[name][-1] if decisions[name] else None)
        timelines[name].append(own)
        row[f"{name}.gpus"] = own["gpus"]
        row["gpus"] += own["gpus"]
        row["granted_gpus"] += sum(n * per_replica[name][p] for p, n in granted[name].items())
    return row


