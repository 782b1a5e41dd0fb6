"""A frontier point that beats the offline schedule on both axes: one more search, started from it.

The offline search starts from every policy the backtest ran, from the planner's cheaper quantiles and from
the planner fed the true load with its scale-down unrestricted. A frontier point it never saw can still beat
what it found (README, "Simulator and backtests", Frontiers, has one from the quick suite). The yardstick is
then broken at that point. So the dominating points' own schedules seed one more search, in a group of their
own (offline.py's greedy trim ends where its start leads). Its result replaces the reference when it meets
the target on fewer GPU-hours, which it always can: each seed already attains at least the reference's
attainment, and a seed replays its policy exactly. What was built from the old schedule (static holds its
peak) is replayed against the new one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from planner.sim.evaluate.backtest import (
    OFFLINE_SIMULATIONS,
    BacktestResult,
    offline_reference,
    offline_search,
    schedule_baselines,
    score_run,
    yardstick_checks,
)
from planner.sim.evaluate.baselines.registry import REGISTRY
from planner.sim.evaluate.frontier import (
    Knob,
    Progress,
    SweepJob,
    Task,
    assemble,
    build_run,
    frontier_points,
    sweep,
)


def point_name(point: Mapping) -> str:
    return f"{point['policy']} {point['knob']} {point['value']:g}"


def describe(names: Sequence[str], before: Mapping, after: Mapping) -> str:
    """The one line a console prints when the offline schedule was searched again."""
    return (f"offline schedule searched again from {', '.join(names)} (they beat it on both axes): "
            f"{before['attainment_joint']:.2%} on {before['gpu_hours']:.2f} GPU-h -> "
            f"{after['attainment_joint']:.2%} on {after['gpu_hours']:.2f}")


def reseed_offline(result: BacktestResult, knob_set: Mapping[str, Knob], dominating: Sequence[Mapping],
                   forecaster: str | None, max_simulations: int, workers: int = 1) -> BacktestResult | None:
    """``result`` with the offline schedule searched again from the ``dominating`` frontier points (entries of
    frontier.json's ``points_dominating_offline``), or None when that search found nothing cheaper."""
    ctx, config = result.context, result.config
    if ctx is None or config is None:
        raise ValueError("reseed_offline needs a BacktestResult with its context and config")
    runs = {point_name(p): build_run(ctx, knob_set[p["policy"]], p["value"], forecaster) for p in dominating}
    replays = {name: score_run(run, ctx, config)[1] for name, run in runs.items()}
    found = offline_search(ctx, config, replays, [], max_simulations, None, workers, [runs])
    report = result.report
    new_ref = offline_reference(found, ctx.policy, ctx.trace.duration_s)
    if found.attainment < found.target or new_ref["gpu_hours"] >= report["references"]["offline"]["gpu_hours"]:
        return None
    ctx = dataclasses.replace(ctx, schedule=found)
    built_from_schedule = [name for name in report["policies"] if name in REGISTRY and REGISTRY[name].needs_schedule]
    policies, more_replays = schedule_baselines(ctx, config, built_from_schedule)
    report = {**report, "policies": {**report["policies"], **policies},
              "references": {**report["references"], "offline": new_ref}}
    report["checks"] = yardstick_checks(report)
    return dataclasses.replace(result, report=report, context=ctx,
                               replays={**result.replays, **more_replays, "offline": found.replay})


def frontier_reseeded(result: BacktestResult, forecaster: str | None = None, quick: bool = False, workers: int = 1,
                      progress: Progress | None = None, max_simulations: int = OFFLINE_SIMULATIONS
                      ) -> tuple[dict, BacktestResult]:
    """run_frontier over every sweepable policy, then, when points beat the offline schedule, the schedule
    searched again from them (``reseeded_from`` in frontier.json names them) and the backtest as it then
    reads. A point that still beats the new schedule stays in ``points_dominating_offline``."""
    knob_set, points = frontier_points(result, forecaster, None, quick, workers, progress)
    front = assemble(result.report, knob_set, points)
    dominating = front["points_dominating_offline"]
    better = reseed_offline(result, knob_set, dominating, forecaster, max_simulations, workers) if dominating else None
    if better is None:
        return front, result
    assert better.context is not None and better.config is not None
    stale: list[Task] = [t for t in points if t[0] in REGISTRY and REGISTRY[t[0]].needs_schedule]
    if stale:  # static's sizes are multiples of the schedule's peak
        points = {**points, **sweep(SweepJob(better.context, better.config, forecaster, knob_set), stale, workers)}
    front = assemble(better.report, knob_set, points)
    front["reseeded_from"] = [point_name(p) for p in dominating]
    return front, better
