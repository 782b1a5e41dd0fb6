"""Attainment vs GPU-hour frontiers: each policy's headroom knob swept over one trace.

One backtest row is one point: a policy at whatever headroom it was given. A policy that spends more to
attain more is not better or worse for it; what can be compared is the whole curve each policy traces when
its own headroom knob is turned. Knobs, values listed from least to most headroom:

- ``planner``: the policy's ``forecast.quantile`` (the quantile of each pool's forecast work it sizes for);
- ``dynamo-throughput``: ``utilization`` (planning against that share of the profiled throughput; ours, see
  planner/sim/evaluate/baselines/dynamo_throughput.py);
- ``dynamo-load``: ``sla_scale``, the TTFT and ITL targets its regressions solve for (Dynamo's ``--ttft`` and
  ``--itl``) times the scale, as a Dynamo user buys headroom; every point is still scored on the policy's SLA;
- ``static``: ``peak_scale`` x the offline schedule's peak, held all along;
- ``reactive``: ``target_scale`` x every HPA threshold (planner/sim/evaluate/baselines/reactive.py).

Every point replays the same trace with the same warm-up and starting replicas as the backtest it extends;
the backtest's own run of a policy is that policy's point at its default value and is not replayed again.
Points are independent replays, so they run on worker processes (planner/sim/evaluate/workers.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.config import Policy
from planner.errors import UserError
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.backtest import (
    BacktestResult,
    Run,
    dominates,
    planner_run,
    score_run,
    with_quantile,
)
from planner.sim.evaluate.baselines.dynamo_load import DynamoLoadController
from planner.sim.evaluate.baselines.dynamo_throughput import DynamoThroughputController
from planner.sim.evaluate.baselines.reactive import ReactiveController
from planner.sim.evaluate.baselines.registry import REGISTRY, BaselineContext, static_controller
from planner.sim.evaluate.envelope import RANGE, compare
from planner.sim.evaluate.workers import process_context
from planner.types import Controller

PLANNER = "planner"
DYNAMO = ("dynamo-throughput", "dynamo-load")


@dataclass(frozen=True)
class Knob:
    policy: str  # the policy's name in a backtest report
    name: str
    values: tuple[float, ...]  # from least to most headroom
    default: float  # the value the backtest's own run of the policy used

    def __post_init__(self) -> None:
        if self.default not in self.values:
            raise ValueError(f"{self.policy}: default {self.default} is not among {self.values}")


def knobs(policy: Policy, quick: bool = False) -> dict[str, Knob]:
    """Every sweepable policy's knob; ``quick`` keeps three values each (for CI)."""
    q = float(policy.forecast.quantile)
    full = {
        PLANNER: Knob(PLANNER, "quantile", tuple(sorted({0.5, 0.7, 0.8, 0.9, 0.95, 0.99, q})), q),
        "dynamo-throughput": Knob("dynamo-throughput", "utilization", (1.0, 0.9, 0.8, 0.7, 0.6), 1.0),
        "dynamo-load": Knob("dynamo-load", "sla_scale", (1.0, 0.85, 0.7, 0.55), 1.0),
        "static": Knob("static", "peak_scale", (0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3), 1.0),
        "reactive": Knob("reactive", "target_scale", (1.5, 1.25, 1.0, 0.75, 0.5), 1.0),
    }
    if not quick:
        return full
    short = {PLANNER: tuple(sorted({0.5, 0.9, 0.99, q})), "dynamo-throughput": (1.0, 0.8, 0.6),
             "dynamo-load": (1.0, 0.7), "static": (0.8, 1.0, 1.2), "reactive": (1.5, 1.0, 0.5)}
    return {k: Knob(k, v.name, short[k], v.default) for k, v in full.items()}


def offline_seed_quantiles(policy: Policy, quick: bool = False) -> tuple[float, ...]:
    """The planner's frontier points cheaper than the policy's own quantile: seeds of the offline search
    (run_backtest's ``seed_quantiles``), so the yardstick has seen every planner schedule likely to undercut it."""
    knob = knobs(policy, quick)[PLANNER]
    return tuple(v for v in knob.values if v < knob.default)


def build_run(ctx: BaselineContext, knob: Knob, value: float, forecaster: str | None) -> Run:
    """The controller of ``knob.policy`` at ``value``, starting where the backtest started it."""
    if knob.policy == PLANNER:
        return planner_run(ctx, forecaster, with_quantile(ctx.policy, value))
    builder = _BUILDERS.get(knob.policy)
    if builder is None:
        raise ValueError(f"no knob for {knob.policy!r}")
    c = builder(ctx, value)
    entry = REGISTRY[knob.policy]
    return c, entry.window_s(c, ctx), entry.starting_replicas(c, ctx)


def _dynamo_throughput(ctx: BaselineContext, utilization: float) -> Controller:
    return DynamoThroughputController(ctx.policy, ctx.profile, ctx.initial, predictor=ctx.dynamo_predictor,
                                      utilization=utilization)


def _dynamo_load(ctx: BaselineContext, sla_scale: float) -> Controller:
    sla = ctx.policy.sla
    tight = ctx.policy.model_copy(update={"sla": sla.model_copy(update={"ttft_ms": sla.ttft_ms * sla_scale,
                                                                          "itl_ms": sla.itl_ms * sla_scale})})
    name = "dynamo-load" if sla_scale == 1.0 else f"dynamo-load[sla_scale={sla_scale:g}]"
    c = DynamoLoadController(tight, ctx.profile, ctx.initial, name=name)
    c.params = {**c.params, "sla_scale": sla_scale}
    return c


def _static(ctx: BaselineContext, peak_scale: float) -> Controller:
    if ctx.schedule is None:
        raise ValueError("static's frontier needs the offline schedule (BaselineContext.schedule)")
    peak = ctx.schedule.peak(ctx.warmup_s)
    sizes = {p: max(ctx.policy.pool(p).min_replicas, math.ceil(n * peak_scale - 1e-9)) for p, n in peak.items()}
    name = "static" if peak_scale == 1.0 else f"static[peak_scale={peak_scale:g}]"
    return static_controller(ctx, sizes, name)


def _reactive(ctx: BaselineContext, target_scale: float) -> Controller:
    return ReactiveController(ctx.policy, ctx.profile, ctx.initial, target_scale=target_scale)


_BUILDERS: dict[str, Callable[[BaselineContext, float], Controller]] = {
    "dynamo-throughput": _dynamo_throughput, "dynamo-load": _dynamo_load, "static": _static, "reactive": _reactive}


# ------------------------------------------------------------------------------------------------ sweep
@dataclass(frozen=True)
class SweepJob:
    """What every point is replayed against (sent once to each worker process)."""

    context: BaselineContext
    config: SimConfig
    forecaster: str | None
    knobs: Mapping[str, Knob]


Task = tuple[str, float]  # (policy, knob value)
Progress = Callable[[int, int], None]  # (points done, points in all)

_JOB: SweepJob | None = None  # the job in a worker process (set by the pool's initializer)


def _init_worker(job: SweepJob) -> None:
    global _JOB
    _JOB = job


def run_point(job: SweepJob, task: Task) -> tuple[Task, dict]:
    policy, value = task
    knob = job.knobs[policy]
    summary, _ = score_run(build_run(job.context, knob, value, job.forecaster), job.context, job.config)
    return task, point_entry(summary, knob, value)


def _run_in_worker(task: Task) -> tuple[Task, dict]:
    assert _JOB is not None
    return run_point(_JOB, task)


def point_entry(summary: Mapping, knob: Knob, value: float) -> dict:
    return {"knob": knob.name, "value": value, "default": value == knob.default, **summary}


def sweep(job: SweepJob, tasks: Sequence[Task], workers: int = 1, progress: Progress | None = None) -> dict[Task, dict]:
    """Replay every task; ``workers`` > 1 runs them on that many worker processes. The results do not depend
    on ``workers`` (each replay is deterministic and independent)."""
    done: dict[Task, dict] = {}
    if progress:
        progress(0, len(tasks))
    if workers <= 1 or len(tasks) < 2:
        results: Iterable[tuple[Task, dict]] = (run_point(job, t) for t in tasks)
        for task, entry in results:
            done[task] = entry
            if progress:
                progress(len(done), len(tasks))
        return done
    with process_context().Pool(min(workers, len(tasks)), initializer=_init_worker, initargs=(job,)) as pool:
        for task, entry in pool.imap_unordered(_run_in_worker, tasks):
            done[task] = entry
            if progress:
                progress(len(done), len(tasks))
    return done


# ------------------------------------------------------------------------------------------------ frontier
def frontier_tasks(knob_set: Mapping[str, Knob], have_defaults: Mapping[str, dict]) -> list[Task]:
    """Every (policy, value) to replay: all values but the default when the backtest already ran it. The slow
    controllers (dynamo-load ticks every 5 s) go first so the workers finish together."""
    tasks = [(k.policy, v) for k in knob_set.values() for v in k.values
             if not (v == k.default and k.policy in have_defaults)]
    return sorted(tasks, key=lambda t: (t[0] != "dynamo-load", t[0]))


def assemble(report: Mapping, knob_set: Mapping[str, Knob], points: Mapping[Task, dict]) -> dict:
    """frontier.json: per policy its points in knob order (least headroom first), the references, and how
    the planner's frontier compares with each Dynamo mode's."""
    policies: dict[str, dict[str, Any]] = {}
    for name, knob in knob_set.items():
        entries = []
        for v in knob.values:
            if (name, v) in points:
                entries.append(points[(name, v)])
            elif v == knob.default and name in report["policies"]:
                entries.append(point_entry(report["policies"][name], knob, v))
        policies[name] = {"knob": knob.name, "points": entries}
    ref = report["references"]
    off = ref["offline"]
    out = {"range": list(RANGE), "policies": policies,
           "references": {"lower_bound_gpu_hours": ref["lower_bound"]["gpu_hours"],
                          "offline": {"attainment_joint": off["attainment_joint"], "gpu_hours": off["gpu_hours"]}},
           "comparisons": [compare(PLANNER, policies[PLANNER]["points"], d, policies[d]["points"])
                           for d in DYNAMO if PLANNER in policies and d in policies]}
    single = {k: {"attainment_joint": p["attainment_joint"], "gpu_hours": p["gpu_hours"]}
              for k, p in report["policies"].items() if k not in knob_set and k not in policies}
    if single:
        out["single_points"] = single  # policies with no knob (planner+perfect-forecast)
    # The offline search is seeded from the backtest's own runs only: a frontier point it never saw can still
    # beat it on both axes, and then the yardstick is broken at that point. Said, never hidden.
    out["points_dominating_offline"] = [
        {"policy": name, "knob": entry["knob"], "value": p["value"], "attainment_joint": p["attainment_joint"],
         "gpu_hours": p["gpu_hours"]}
        for name, entry in policies.items() for p in entry["points"] if dominates(p, off)]
    return out


def run_frontier(result: BacktestResult, forecaster: str | None = None, policies: Sequence[str] | None = None,
                 quick: bool = False, workers: int = 1, progress: Progress | None = None) -> dict:
    """The frontier of ``policies`` (default: the planner and every sweepable policy of the backtest) on
    the backtest's trace, with its references; the backtest's own runs are the default points."""
    knob_set, points = frontier_points(result, forecaster, policies, quick, workers, progress)
    return assemble(result.report, knob_set, points)


def frontier_points(result: BacktestResult, forecaster: str | None = None, policies: Sequence[str] | None = None,
                    quick: bool = False, workers: int = 1, progress: Progress | None = None
                    ) -> tuple[dict[str, Knob], dict[Task, dict]]:
    """The knobs swept and every point replayed (run_frontier's arguments)."""
    if result.context is None or result.config is None:
        raise ValueError("run_frontier needs a BacktestResult from run_backtest (context and config)")
    ctx = result.context
    report = result.report
    every = knobs(ctx.policy, quick)
    chosen = list(policies) if policies is not None else [PLANNER, *(p for p in report["policies"] if p in every)]
    unknown = [p for p in chosen if p not in every]
    if unknown:
        raise UserError(f"frontier: no knob for {', '.join(unknown)}; sweepable: {', '.join(every)}", key="frontier")
    knob_set = {p: k for p, k in every.items() if p in chosen}  # in the knobs' order, whatever was asked
    job = SweepJob(ctx, result.config, forecaster, knob_set)
    return knob_set, sweep(job, frontier_tasks(knob_set, report["policies"]), workers, progress)
