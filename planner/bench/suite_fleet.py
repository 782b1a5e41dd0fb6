"""The suite's fleet scenarios (issue 30): ``planner bench fleet``'s eight models on one GPU budget, run by
``planner bench suite`` beside the single-policy scenarios.

- ``fleet``: the Azure hour (a 10-minute warm-up, then the 48-50 minutes left scored; ``--quick``: 20 minutes);
- ``fleet-day``: the same fleet over ServeGen m-large's day 2 as recorded (``--quick``: its first 20 minutes),
  where scale to zero and the shared budget have the day's troughs to pay for themselves.

Each is one task on a worker (seed 0, the benchmark's 44-GPU budget, the sparse models asleep between their
busy windows): the fleet, the same planners without the shared budget, static pools at each model's peak and
the cheapest static pools (planner/sim/evaluate/fleet_backtest.py). Its report.json, report.md and fleet.png go
under the suite's folder; suite.json carries the report and issue 30's targets, each met or missed with why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from planner.bench import scenarios
from planner.errors import UserError

STATIC_PEAK_RATIO = 0.5  # issue 30: at most half the GPU-hours of static per-model pools sized at their peaks


@dataclass(frozen=True)
class SuiteFleet:
    name: str
    day: bool
    description: str


FLEETS: tuple[SuiteFleet, ...] = (
    SuiteFleet("fleet", False, "eight models on 44 GPUs over the Azure hour: two large (priority 10), a 4x burst, "
                               "five sparse ones asleep between busy windows"),
    SuiteFleet("fleet-day", True, "the same fleet over ServeGen m-large's day 2 as recorded (the hour's peak rate)"),
)


def names() -> tuple[str, ...]:
    return tuple(f.name for f in FLEETS)


def split(selected: list[str] | None) -> tuple[list[scenarios.Scenario], list[SuiteFleet]]:
    """The chosen backtest scenarios and fleets (none chosen: the default scenarios and every fleet); an unknown name is one line
    listing every name the suite knows."""
    if not selected:
        return scenarios.pick(None), list(FLEETS)
    known = (*scenarios.names(), *names())
    unknown = [n for n in selected if n not in known]
    if unknown:
        raise UserError(f"scenarios: unknown {', '.join(unknown)}; allowed: {', '.join(known)}", key="scenarios")
    backtests = [n for n in selected if n in scenarios.names()]
    return (scenarios.pick(backtests) if backtests else []), [f for f in FLEETS if f.name in selected]


def check_traces(fleets: list[SuiteFleet], traces_dir: Path | None) -> None:
    """Every trace file the chosen fleets read exists (before anything runs): one line naming the file."""
    from planner.bench.fleet import missing_trace

    folder = traces_dir or scenarios.default_traces_dir()
    for f in fleets:
        missing = missing_trace(folder, f.day)
        if missing is not None:
            raise UserError(f"traces: {missing} not found (scenario {f.name}); pass the folder that holds "
                            "azure2023/ and servegen/", key="traces")


def named(name: str) -> SuiteFleet:
    return next(f for f in FLEETS if f.name == name)


def run_fleet(f: SuiteFleet, quick: bool, traces_dir: Path | None, policy_path: Path | None, out: Path,
              progress: Callable[[str, float, float], None] | None = None, plots: bool = True) -> dict:
    """One fleet scenario: its report (with ``command``, the ``planner bench fleet`` line that replays it), written
    with report.md and fleet.png under ``out``/<name>."""
    from planner.bench import fleet as fb
    from planner.sim.evaluate.fleet_backtest import run_fleet_backtest
    from planner.sim.evaluate.fleet_report import write_fleet_report

    fleet, traces = fb.bench_fleet(quick, traces_dir, day=f.day, policy_path=policy_path)
    result = run_fleet_backtest(fleet, traces, warmup_s=fb.fleet_warmup(quick), progress=progress)
    result.report.update(fb.trace_notes(quick, f.day, fb.DAY_COMPRESS),
                         command=fb.fleet_command(quick, day=f.day, policy_path=policy_path))
    write_fleet_report(out / f.name, result, fleet, traces, plots)
    return result.report


def targets(report: Mapping) -> list[dict]:
    """Issue 30's targets as measured: every top-priority model meets its SLA while the budget binds; no request
    fails (on scale-down or from zero); the fleet spends at most half the static per-model pools' GPU-hours."""
    checks, fleet, policies = report["checks"], report["fleet"], report["policies"]
    top = max(p["priority"] for p in policies.values())
    high = {n: p for n, p in policies.items() if p["priority"] == top}
    att = ", ".join(f"{n} {'-' if p['attainment_joint'] is None else format(p['attainment_joint'], '.2%')}"
                    for n, p in high.items())
    binds = checks["budget_binds"]
    high_met = bool(checks["high_priority_sla_met"] and binds)
    ratio = checks.get("gpu_hours_vs_static_peak")
    static_h = report.get("comparisons", {}).get("static_peak", {}).get("gpu_hours")
    return [
        {"target": "high_priority", "met": high_met,
         "detail": (f"priority {top}: {att}; the budget bound on {fleet['binding_ticks']} ticks" if binds else
                    f"priority {top}: {att}; the budget never bound, so the target was not tested")},
        {"target": "no_failures", "met": checks["failed_requests"] == 0,
         "detail": f"{checks['failed_requests']} requests failed"},
        {"target": "static_peak", "met": ratio is not None and ratio <= STATIC_PEAK_RATIO,
         "detail": ("no static comparison" if ratio is None else
                    f"{fleet['gpu_hours']:.2f} GPU-h, {ratio:.2f}x the static pools at each model's peak "
                    f"({static_h:.2f}; target <= {STATIC_PEAK_RATIO:g}x)")},
    ]
