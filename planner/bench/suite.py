"""`planner bench suite`: every scenario of planner/bench/scenarios.py backtested, with the planner's and Dynamo's
frontiers, and the fleet scenarios of planner/bench/suite_fleet.py (eight models on one GPU budget), in one
command; one table per kind, suite.json (``scenarios`` and ``fleets``) and per-scenario reports.

Work is cut into independent tasks, spread over worker processes (every core): one fleet run per fleet scenario
(the day's is the longest task, so the fleets go first), one backtest per scenario (the planner, the baselines,
the lower bound and the offline schedule) and one replay per frontier point. Backtests go next, longest trace
first, and the short frontier points fill in behind, so the cores finish together. Traces and profiles are
built once, in the parent, and sent to each worker once (a fleet builds its own eight traces in its worker).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from planner import __version__
from planner.bench import scenarios, suite_fleet
from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.sim.evaluate.backtest import OFFLINE_REPLAY, BacktestResult, run_backtest, sim_setup
from planner.sim.evaluate.baselines.registry import DEFAULT_BASELINES
from planner.sim.evaluate.frontier import (
    DYNAMO,
    PLANNER,
    SweepJob,
    assemble,
    knobs,
    offline_seed_quantiles,
    run_point,
)
from planner.sim.evaluate.reseed import describe, point_name, reseed_offline
from planner.sim.evaluate.workers import process_context
from planner.sim.traces.records import RequestTrace

FRONTIER_POLICIES = (PLANNER, *DYNAMO)  # the targets compare these; static and reactive: `backtest --frontier`
OFFLINE_SIMULATIONS = {False: 24, True: 8}  # full, quick
FLEET_UNITS = 100.0  # a fleet's bar: its shared replay to 45, the planners alone to 90, the static pools after
FLEET_PHASE_UNITS = 45.0
FLEET_PHASES = {"fleet": 0.0, "unshared": FLEET_PHASE_UNITS}


@dataclass(frozen=True)
class Inputs:
    scenario: scenarios.Scenario
    trace: RequestTrace
    profile: Profile
    policy: PolicyFile
    warmup_s: float
    yesterday: RequestTrace | None = None  # the previous day, for static-yesterday (servegen-day)


# Set in the parent, and in each worker by its initializer; the workers read them.
_INPUTS: dict[str, Inputs] = {}
_QUICK = False
_OUT: Path | None = None  # where each backtest task writes its scenario's timeline.csv and decisions.csv
_QUEUE: Any = None  # a SimpleQueue carrying progress from the workers
_JOBS: dict[str, SweepJob] = {}  # per worker: each scenario's sweep job, built on its first point


def run(console: Console, scenario_names: list[str] | None, quick: bool, traces_dir: Path | None, out: Path,
        workers: int, command: str, policy_path: Path | None = None) -> dict:
    """Run the suite and write ``out``/suite.json (+ per-scenario reports); returns suite.json's content.
    ``policy_path``: a policy to compare instead of the example as shipped (its profile is swapped per scenario
    all the same)."""
    global _QUICK, _QUEUE, _OUT
    t0, c0 = time.perf_counter(), time.process_time()
    chosen, fleets = suite_fleet.split(scenario_names)
    policy = scenarios.scenario_policy(policy_path)  # the file the user named first, then the data it runs on
    scenarios.check_traces(chosen, traces_dir)
    suite_fleet.check_traces(fleets, traces_dir)
    _INPUTS.clear()
    for s in chosen:
        own = scenarios.policy_for(s, policy)
        _INPUTS[s.name] = Inputs(s, scenarios.scenario_trace(s, traces_dir, quick), scenarios.scenario_profile(s, own),
                                 own, scenarios.warmup_s(s, quick), scenarios.yesterday_trace(s, traces_dir))
    _QUICK, _OUT = quick, out
    # The fleets first: the day's is the suite's longest task.
    tasks = [("fleet", f.name, _path(traces_dir), _path(policy_path), str(out)) for f in reversed(fleets)]
    tasks += _tasks(quick)
    console.print(f"suite: {len(chosen) + len(fleets)} scenarios, {len(tasks)} tasks on {workers} worker processes"
                  f"{' (quick)' if quick else ''}")
    ctx = process_context()
    _QUEUE = ctx.SimpleQueue()
    results: dict[tuple, Any] = {}
    cpu_s: dict[tuple, float] = {}
    with ctx.Pool(max(1, min(workers, len(tasks))), initializer=_init_worker,
                  initargs=(dict(_INPUTS), quick, _QUEUE, out)) as pool:
        with _Progress(console, tasks) as bar:
            for task, value, cpu in pool.imap_unordered(_run_task, tasks):
                results[task], cpu_s[task] = value, cpu
                bar.finished(task)
    _reseed(console, results, quick, workers)
    wall_s = time.perf_counter() - t0
    doc = _document(results, quick, command, wall_s, workers, scenarios.policy_label(policy_path))
    reports = {t[1]: v for t, v in results.items() if t[0] == "fleet"}
    doc["fleets"] = {f.name: {"description": f.description, "report": reports[f.name],
                              "targets": suite_fleet.targets(reports[f.name])} for f in fleets}
    doc["cpu_s"] = _cpu_summary(cpu_s, workers, time.process_time() - c0)
    _write(doc, out)
    return doc


def _path(p: Path | None) -> str | None:
    return None if p is None else str(p)


def _init_worker(inputs: dict[str, Inputs], quick: bool, queue: Any, out: Path) -> None:
    global _QUICK, _QUEUE, _OUT
    _INPUTS.update(inputs)
    _QUICK, _QUEUE, _OUT = quick, queue, out


def _tasks(quick: bool) -> list[tuple]:
    backtests = sorted(_INPUTS, key=lambda n: -len(_INPUTS[n].trace))
    points = []
    for name in backtests:
        ks = knobs(_INPUTS[name].policy, quick)
        points += [("point", name, p, v) for p in FRONTIER_POLICIES for v in ks[p].values if v != ks[p].default]
    points.sort(key=lambda t: (t[2] != "dynamo-load", -len(_INPUTS[t[1]].trace)))
    return [("backtest", n) for n in backtests] + points


def _run_task(task: tuple) -> tuple[tuple, Any, float]:
    """One task in a worker: its result and the CPU seconds it took (on a shared machine the wall time
    says as much about the other jobs as about this one)."""
    c0 = time.process_time()
    value = _backtest(task[1]) if task[0] == "backtest" else _fleet(task) if task[0] == "fleet" else _point(task)
    return task, value, round(time.process_time() - c0, 2)


def _cpu_summary(cpu_s: Mapping[tuple, float], workers: int, parent_s: float) -> dict:
    """CPU seconds per scenario and in all (the parent's loading and writing too), and the wall time they would
    take on ``workers`` idle cores: the parent's share plus the larger of an even split of the tasks and the
    longest task."""
    per: dict[str, float] = {}
    for task, s in cpu_s.items():
        per[task[1]] = round(per.get(task[1], 0.0) + s, 2)
    tasks = sum(cpu_s.values())
    longest = max(cpu_s.values(), default=0.0)
    return {"total": round(tasks + parent_s, 1), "parent": round(parent_s, 1), "per_scenario": per,
            "longest_task": round(longest, 1),
            "idle_cores_wall_estimate": round(parent_s + max(tasks / max(1, workers), longest), 1)}


def _point(task: tuple) -> dict:
    _, name, policy, value = task
    job = _JOBS.get(name)
    if job is None:
        inp = _INPUTS[name]
        context, config = sim_setup(inp.trace, inp.profile, inp.policy, warmup_s=inp.warmup_s)
        job = _JOBS[name] = SweepJob(context, config, None, knobs(inp.policy, _QUICK))
    _, entry = run_point(job, (policy, value))
    _send(("point", name))
    return entry


def _backtest(name: str) -> dict:
    inp = _INPUTS[name]

    def progress(phase: str, done: float, total: float) -> None:
        _send(("phase", name, phase, done, total))

    baselines = (*DEFAULT_BASELINES, "static-yesterday") if inp.yesterday is not None else DEFAULT_BASELINES
    res = run_backtest(inp.trace, inp.profile, inp.policy, baselines=baselines, warmup_s=inp.warmup_s,
                       yesterday=inp.yesterday, peak_window_s=scenarios.peak_window_s(inp.scenario),
                       offline_simulations=OFFLINE_SIMULATIONS[_QUICK], workers=1, progress=progress,
                       seed_quantiles=offline_seed_quantiles(inp.policy, _QUICK),
                       trace_meta={"format": inp.scenario.fmt, "rate_scale": inp.scenario.rate_scale,
                                   "scenario": name})
    if _OUT is not None:
        _write_records(res, _OUT / name)
    return res.report


def _write_records(res: BacktestResult, folder: Path) -> None:
    """The scenario's timeline.csv and decisions.csv, written where its replays are (the worker). The offline
    schedule's replay is left out: the suite may search it again from frontier points afterwards (_reseed), and
    report.json then holds a schedule this replay is not."""
    from planner.sim.evaluate.decisions_log import write_decisions
    from planner.sim.evaluate.report import write_timelines

    folder.mkdir(parents=True, exist_ok=True)
    kept = {k: v for k, v in res.replays.items() if k != OFFLINE_REPLAY}
    write_timelines(BacktestResult(res.report, kept, res.trace), folder)
    sla = res.report["sla"]
    write_decisions(kept, float(sla["ttft_ms"]), float(sla["itl_ms"]), folder)


def _fleet(task: tuple) -> dict:
    _, name, traces_dir, policy_path, out = task
    f = suite_fleet.named(name)

    def progress(phase: str, done: float, total: float) -> None:
        _send(("fleet", name, phase, done / max(total, 1e-9)))

    return suite_fleet.run_fleet(f, _QUICK, None if traces_dir is None else Path(traces_dir),
                                 None if policy_path is None else Path(policy_path), Path(out), progress)


def _send(item: tuple) -> None:
    if _QUEUE is not None:
        _QUEUE.put(item)


class _Progress:
    """One bar per scenario: its backtest's phases (policies replayed, offline simulations) and its points."""

    def __init__(self, console: Console, tasks: list[tuple]) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("[bold]{task.fields[name]:<15}"), TextColumn("{task.description:<28}"),
                            BarColumn(), TextColumn("{task.percentage:>5.1f}%"), TimeElapsedColumn(), console=console)
        self.backtest_units = len(DEFAULT_BASELINES) + 1 + OFFLINE_SIMULATIONS[_QUICK]
        self.ids = {}
        for name in dict.fromkeys(t[1] for t in tasks):
            points = sum(1 for t in tasks if t[0] == "point" and t[1] == name)
            total = FLEET_UNITS if name in suite_fleet.names() else self.backtest_units + points
            self.ids[name] = self.bar.add_task("waiting", total=total, name=name)
        self.points: dict[str, int] = dict.fromkeys(self.ids, 0)
        self.phases: dict[str, dict[str, float]] = {n: {} for n in self.ids}
        self.thread = threading.Thread(target=self._listen, daemon=True)

    def __enter__(self) -> _Progress:
        self.bar.start()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        _send(("stop",))
        self.thread.join(timeout=5)
        self.bar.stop()

    def _listen(self) -> None:
        while True:
            item = _QUEUE.get()
            if item[0] == "stop":
                return
            if item[0] == "fleet":  # the shared replay, then the planners alone; the static searches after
                _, name, phase, share = item
                done = FLEET_PHASES.get(phase, 0.0) + share * FLEET_PHASE_UNITS
                self.bar.update(self.ids[name], description=f"{phase} replay", completed=done)
                continue
            if item[0] == "phase":
                _, name, phase, done, total = item
                units = done if phase == "offline schedule" else done / max(total, 1e-9)
                self.phases[name][phase] = units
                self.bar.update(self.ids[name], description=phase)
            else:
                self.points[item[1]] += 1
            self._refresh(item[1])

    def _refresh(self, name: str) -> None:
        done = min(sum(self.phases[name].values()), self.backtest_units) + self.points[name]
        self.bar.update(self.ids[name], completed=done)

    def finished(self, task: tuple) -> None:
        if task[0] == "fleet":
            self.bar.update(self.ids[task[1]], description="done", completed=FLEET_UNITS)
        elif task[0] == "backtest":
            self.phases[task[1]] = {"done": float(self.backtest_units)}
            self.bar.update(self.ids[task[1]], description="frontier points")
            self._refresh(task[1])


def _reseed(console: Console, results: dict[tuple, Any], quick: bool, workers: int) -> None:
    """Where frontier points beat a scenario's offline schedule, the schedule searched again from them
    (planner/sim/evaluate/reseed.py); its report in ``results`` is replaced."""
    for name, inp in _INPUTS.items():
        report = results[("backtest", name)]
        ks = _frontier_knobs(inp, quick)
        points = {(t[2], t[3]): v for t, v in results.items() if t[0] == "point" and t[1] == name}
        dominating = assemble(report, ks, points)["points_dominating_offline"]
        if not dominating:
            continue
        ctx, config = sim_setup(inp.trace, inp.profile, inp.policy, warmup_s=inp.warmup_s)
        better = reseed_offline(BacktestResult(report, {}, inp.trace, ctx, config), ks, dominating, None,
                                OFFLINE_SIMULATIONS[quick], workers)
        before = report["references"]["offline"]
        if better is None:
            console.print(f"{name}: searched the offline schedule again from {len(dominating)} frontier points "
                          "that beat it; found nothing cheaper")
            continue
        results[("backtest", name)] = better.report
        results[("reseeded", name)] = [point_name(p) for p in dominating]
        after = better.report["references"]["offline"]
        console.print(f"{name}: {describe(results[('reseeded', name)], before, after)}", highlight=False)


def _frontier_knobs(inp: Inputs, quick: bool) -> dict:
    return {p: k for p, k in knobs(inp.policy, quick).items() if p in FRONTIER_POLICIES}


def _document(results: Mapping[tuple, Any], quick: bool, command: str, wall_s: float, workers: int,
              policy: str) -> dict:
    by_scenario: dict[str, dict] = {}
    rows: list[dict] = []
    for name, inp in _INPUTS.items():
        report = results[("backtest", name)]
        points = {(t[2], t[3]): v for t, v in results.items() if t[0] == "point" and t[1] == name}
        frontier = assemble(report, _frontier_knobs(inp, quick), points)
        if ("reseeded", name) in results:
            frontier["reseeded_from"] = results[("reseeded", name)]
        by_scenario[name] = {"description": inp.scenario.description, "report": report, "frontier": frontier,
                           "targets": scenarios.targets(report, frontier)}
        rows += scenarios.entries(inp.scenario, report, quick)
    return {"command": command, "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "planner_version": __version__, "quick": quick, "wall_s": round(wall_s, 1), "workers": workers,
            "cpu_count": os.cpu_count(), "policy": policy,
            "entries": rows, "scenarios": by_scenario}


def _write(doc: dict, out: Path) -> list[Path]:
    from planner.sim.evaluate.frontier_report import frontier_markdown, write_frontier
    from planner.sim.evaluate.report import render_markdown

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "suite.json"]
    paths[0].write_text(json.dumps(doc, indent=1) + "\n")
    for name, sc in doc["scenarios"].items():
        folder = out / name
        folder.mkdir(exist_ok=True)
        (folder / "report.json").write_text(json.dumps(sc["report"], indent=1) + "\n")
        (folder / "report.md").write_text(render_markdown(sc["report"]) + frontier_markdown(sc["frontier"]))
        paths += write_frontier(sc["frontier"], folder, title=f"{name}: {sc['description']}",
                                sla_percentile=sc["report"]["sla"]["percentile"])
    # A fleet's report.json, report.md and fleet.png: written by its task, where its replays are.
    paths += [out / name / "report.json" for name in doc.get("fleets", {})]
    return paths

