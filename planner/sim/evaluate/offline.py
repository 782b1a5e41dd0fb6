"""The offline schedule: an achievable schedule that knows the whole future, verified by full simulation.

Method (written into every report):
1. A schedule is a replica target per pool on a grid of ``grid_s`` seconds, asked for at each grid time
   exactly as a controller would ask (new replicas take ``startup_s`` to start, removed ones drain).
2. Every schedule is judged by one continuous simulation of the whole replay (warm-up included, state
   carried from minute to minute, start-up and drain billed) and scored like every policy: request-level
   joint attainment over the scored window and its GPU-hours. Nothing is accepted on an approximation.
3. Seeds: the targets every policy of the run actually asked for (each seed replays to exactly that
   policy's result), plus a uniform raise of the best one when none reaches the SLA percentile. The
   cheapest seed that reaches the percentile is the start. Where even the pools' ceilings miss the
   percentile (requests whose own prefill is longer than the TTFT target, which no number of replicas
   serves in time), the target becomes the percentile among what the ceilings reach, and the report says so.
4. Greedy trimming, one pool at a time: cut the targets of the grid cells whose capacity no missed request
   needed (no miss of that pool's kind, by a request its own prefill could have served in time, arrived
   while it was asked for or starting), by a share that halves after every rejected cut, down to single
   replicas on a shrinking share of the cells; a cut is kept only when the full simulation still meets the
   percentile and spends less. Stops when no cut is left to try or the simulation budget is spent.
So no policy of the run can both spend less and attain more than the schedule (it started from each of
them), and the schedule is a real, replayable sequence of targets: an upper bound on the optimum, not a
bound below it (the lower bound in the same report is that).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from planner.config import Policy
from planner.perf.engine import EngineModel
from planner.profile import Profile
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.baselines.common import gpus_per_replica, make_decision
from planner.sim.evaluate.replay import Replay, replay
from planner.sim.evaluate.scoring import summarise
from planner.sim.traces.records import RequestTrace
from planner.types import Decision, Mode, NoData, Observation, Reason

NAME = "offline"
METHOD = ("greedy trim of the cheapest policy schedule meeting the SLA percentile (joint attainment over the "
          "scored window), every candidate judged by one continuous simulation of the whole replay; grid "
          "{grid:g} s, {sims} simulations; an achievable schedule, not a lower bound")
FIRST_CUT = 0.25  # share of a cell's replicas the first trim removes
MIN_STEP = 1.0 / 256  # below this a pool's trimming stops (one replica from under 1 % of its free cells)
RAISE = 1.25  # uniform raise when no seed reaches the percentile
Progress = Callable[[str, int], None]  # (what is being simulated, simulations so far)


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

    def held(self, from_s: float, to_s: float) -> dict[str, int]:
        """The most replicas each pool is asked for over [from_s, to_s) (at least the cell at ``from_s``)."""
        first = min(self.cells - 1, max(0, int(math.floor(from_s / self.grid_s + 1e-9))))
        last = min(self.cells, max(first + 1, int(math.ceil(to_s / self.grid_s - 1e-9))))
        return {p: int(v[first:last].max()) for p, v in self.targets.items()}

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

    observes = False  # the replay need not read metrics for it

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
    target: float = 1.0  # the attainment it had to keep (the SLA percentile unless out of reach)
    reachable: float = 1.0  # the attainment at the ceilings, when it was needed (1.0: not measured)

    def peak(self, from_s: float = 0.0) -> dict[str, int]:
        first = int(math.floor(from_s / self.plan.grid_s))
        return {p: int(v[first:].max() if len(v[first:]) else v.max()) for p, v in self.plan.targets.items()}


# ------------------------------------------------------------------------------------------------ search
@dataclass(frozen=True)
class OfflineJob:
    """What every candidate schedule is judged against (shared with worker processes)."""

    trace: RequestTrace
    profile: Profile
    policy: Policy
    config: SimConfig
    window_s: float
    warmup_s: float
    reachable: float = 1.0  # the attainment the ceilings reach (< the percentile: the percentile is out of reach)

    @property
    def target(self) -> float:
        """The SLA percentile, or, where no number of replicas reaches it (requests whose own prefill is longer
        than the TTFT target), the percentile among the requests the ceilings can serve in time."""
        q = self.policy.sla.percentile / 100.0
        return q if self.reachable >= q else q * self.reachable

    def floors(self) -> dict[str, int]:
        return {p: self.policy.pool(p).min_replicas for p in self.policy.pool_names()}

    def ceilings(self) -> dict[str, int]:
        return {p: self.policy.pool(p).max_replicas for p in self.policy.pool_names()}


def judge(job: OfflineJob, plan: TargetPlan) -> Judged:
    """One continuous simulation of the whole replay under ``plan``, scored like every policy."""
    controller = PlanController(job.policy, job.profile, plan)
    rep = replay(job.trace, job.profile, controller, job.config, plan.at(0.0), window_s=job.window_s,
                 score_from_s=job.warmup_s)
    scores = summarise(rep, job.policy, job.trace.duration_s)
    return Judged(plan, float(scores["attainment_joint"] or 0.0), float(scores["gpu_hours"]), rep)


def needed_cells(job: OfflineJob, judged: Judged) -> dict[str, np.ndarray]:
    """Per pool, the grid cells some missed request needed: asked for while it waited, or up to one start-up
    before. TTFT misses point at the pool that prefills, ITL misses at the pool that decodes."""
    plan, res = judged.plan, judged.replay.results
    scored = res["arrival_s"] >= job.warmup_s
    sla = job.policy.sla
    ok = ~res["failed"]
    with np.errstate(invalid="ignore"):
        ttft_miss = scored & ~(ok & (res["ttft_s"] * 1e3 <= sla.ttft_ms)) & _servable(job)
        itl_miss = scored & ~(ok & (res["itl_mean_s"] * 1e3 <= sla.itl_ms))
    pools = job.policy.pool_names()
    front, back = (pools[0], pools[-1])
    lead = job.config.startup_s + plan.grid_s
    out: dict[str, np.ndarray] = {p: np.zeros(plan.cells, dtype=bool) for p in pools}
    for pool, miss, end in ((front, ttft_miss, res["arrival_s"] + res["ttft_s"]),
                            (back, itl_miss, res["finish_s"])):
        start = res["arrival_s"][miss] - lead
        stop = np.where(np.isfinite(end[miss]), end[miss], res["arrival_s"][miss] + sla.ttft_ms / 1e3)
        lo = np.clip(np.floor(start / plan.grid_s), 0, plan.cells - 1).astype(np.int64)
        hi = np.clip(np.floor(stop / plan.grid_s), 0, plan.cells - 1).astype(np.int64)
        marks = np.zeros(plan.cells + 1, dtype=np.int64)
        np.add.at(marks, lo, 1)
        np.add.at(marks, hi + 1, -1)
        out[pool] |= np.cumsum(marks[:-1]) > 0
    return out


def _servable(job: OfflineJob) -> np.ndarray:
    """Per request: whether its own prefill fits the TTFT target at all (a miss of one that does not says
    nothing about capacity: no number of replicas would have served it in time)."""
    prof, cfg = job.profile, job.config
    dtp = cfg.decode_tp or prof.selected_tp("decode")
    ptp = dtp if job.policy.mode is Mode.AGGREGATED and any(s.tp == dtp for s in prof.prefill) else (
        cfg.prefill_tp or prof.selected_tp("prefill"))  # an aggregated replica prefills at the decode TP
    engine = EngineModel(prof.prefill_curve(ptp), prof.decode_curve(dtp), cfg.chunk_tokens)
    lengths, where = np.unique(job.trace.isl, return_inverse=True)
    own_s = np.array([engine.prefill_s(float(x)) for x in lengths])
    return (own_s * 1e3 <= job.policy.sla.ttft_ms)[where]


def trimmed(plan: TargetPlan, needed: Mapping[str, np.ndarray], floors: Mapping[str, int], pool: str,
            step: float, first_cell: int, last_cell: int | None = None) -> TargetPlan:
    """The plan with ``pool``'s cells that no miss needed cut (never below the floor; cells before
    ``first_cell``, the warm-up, and from ``last_cell`` on, after the replay ended, left alone): ``step`` of
    each cell's replicas, rounded down; where that rounds to nothing anywhere (small pools, small steps), one
    replica from a share 2 x ``step`` of the free cells, the fullest first, so a pool of two replicas is not
    cut in half at once."""
    v = plan.targets[pool]
    free = ~needed[pool] & (v > floors[pool])
    free[:first_cell] = False
    if last_cell is not None:
        free[last_cell:] = False
    cut = np.floor(v * step).astype(np.int64) * free
    if not cut.any():
        cells = np.flatnonzero(free)
        chosen = cells[np.argsort(-v[cells], kind="stable")][:max(1, int(len(cells) * min(1.0, 2.0 * step)))]
        cut[chosen] = 1
    return TargetPlan(plan.grid_s, {**plan.targets, pool: np.maximum(floors[pool], v - cut)})


def raised(plan: TargetPlan, ceilings: Mapping[str, int]) -> TargetPlan:
    return TargetPlan(plan.grid_s, {p: np.minimum(ceilings[p], np.ceil(v * RAISE).astype(np.int64))
                                    for p, v in plan.targets.items()})


def _best_seed(job: OfflineJob, seeds: Mapping[str, TargetPlan], progress: Progress | None
               ) -> tuple[OfflineJob, Judged, str, int]:
    """The cheapest seed that meets the target (raising the best one uniformly when none does). When no seed
    meets the percentile, the ceilings are simulated once: if they miss it too, the target becomes the
    percentile among what they reach (job.reachable), and the search goes on from there."""
    sims = 0
    judged: dict[str, Judged] = {}
    for name, plan in seeds.items():
        judged[name] = judge(job, plan)
        sims += 1
        if progress:
            progress(f"seed {name}", sims)
    if not any(j.attainment >= job.target for j in judged.values()):
        top = next(iter(seeds.values()))
        ceilings = TargetPlan(top.grid_s, {p: np.full(top.cells, c, dtype=np.int64) for p, c in job.ceilings().items()})
        at_ceilings, sims = judge(job, ceilings), sims + 1
        job = replace(job, reachable=at_ceilings.attainment)
    feasible = {n: j for n, j in judged.items() if j.attainment >= job.target}
    if feasible:
        name = min(feasible, key=lambda n: (feasible[n].gpu_hours, n))
        return job, feasible[name], name, sims
    name = max(judged, key=lambda n: (judged[n].attainment, -judged[n].gpu_hours))
    best = judged[name]
    while best.attainment < job.target:
        more = raised(best.plan, job.ceilings())
        if _same(more, best.plan):
            break  # at the ceilings
        best, sims = judge(job, more), sims + 1
        name = f"{name} raised"
        if progress:
            progress(name, sims)
    return job, best, name, sims


_JOB: OfflineJob | None = None  # the job in a worker process (set once by the pool's initializer)


def _init_worker(job: OfflineJob) -> None:
    global _JOB
    _JOB = job


def _judge_in_worker(plan: TargetPlan) -> Judged:
    assert _JOB is not None
    return judge(_JOB, plan)


class _Judge:
    """Judges candidates one at a time, or several at once on worker processes (the job is sent to each once)."""

    def __init__(self, job: OfflineJob, workers: int) -> None:
        self.job = job
        self.pool = None
        if workers > 1:
            from planner.sim.evaluate.workers import process_context

            self.pool = process_context().Pool(workers, initializer=_init_worker, initargs=(job,))

    def many(self, plans: Sequence[TargetPlan]) -> list[Judged]:
        if self.pool is None or len(plans) < 2:
            return [judge(self.job, plan) for plan in plans]
        return list(self.pool.map(_judge_in_worker, plans))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()


def offline_schedule(job: OfflineJob, seeds: Mapping[str, TargetPlan], max_simulations: int = 24,
                     progress: Progress | None = None, workers: int = 1) -> OfflineSchedule:
    """Seeds -> the cheapest that meets the target -> greedy trimming, every step a full simulation.

    Each round cuts each pool that still has room on its own (one candidate per pool, judged at once on
    ``workers`` processes) and keeps the cheapest candidate that still meets the target; a pool whose cut is
    rejected halves its step (a share of replicas per cell, then single replicas on a shrinking share of
    cells) until nothing is left to try."""
    job, best, seeded_from, sims = _best_seed(job, seeds, progress)
    first_cell = int(math.ceil(job.warmup_s / best.plan.grid_s))
    steps = dict.fromkeys(best.plan.targets, FIRST_CUT)
    needed = needed_cells(job, best)
    judges = _Judge(job, max(1, workers))
    try:
        while sims < max_simulations and steps:
            last_cell = int(math.ceil(best.replay.end_s / best.plan.grid_s)) + 1
            tries = [(p, trimmed(best.plan, needed, job.floors(), p, x, first_cell, last_cell))
                     for p, x in steps.items()]
            tries = [(p, plan) for p, plan in tries if not _same(plan, best.plan)][:max_simulations - sims]
            steps = {p: steps[p] for p, _ in tries}  # a pool with nothing left to cut is done
            if not tries:
                break
            results = judges.many([plan for _, plan in tries])
            sims += len(tries)
            if progress:
                progress("trim " + ", ".join(f"{p} {steps[p]:.3g}" for p, _ in tries), sims)
            kept = [(r.gpu_hours, p, r) for (p, _), r in zip(tries, results, strict=True)
                    if r.attainment >= job.target and r.gpu_hours < best.gpu_hours]
            if kept:
                _, pool, best = min(kept, key=lambda k: k[0])
                needed = needed_cells(job, best)
            for p, _ in tries:
                if not kept or p != pool:
                    steps[p] /= 2.0
            steps = {p: x for p, x in steps.items() if x >= MIN_STEP}
    finally:
        judges.close()
    method = METHOD.format(grid=best.plan.grid_s, sims=sims)
    return OfflineSchedule(best.plan, best.replay, best.attainment, best.gpu_hours, sims, seeded_from, method,
                           job.target, job.reachable)


def _same(a: TargetPlan, b: TargetPlan) -> bool:
    return all(np.array_equal(a.targets[p], b.targets[p]) for p in a.targets)
