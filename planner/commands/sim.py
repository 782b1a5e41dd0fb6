"""`planner backtest`: replay a trace under the planner and baselines."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from planner.commands.args import parse_columns, seconds
from planner.commands.args import seed as check_seed
from planner.commands.console import out_console
from planner.commands.oversized import OVERSIZED_HELP, check_oversized, fit_oversized
from planner.commands.progress import phase_progress
from planner.errors import UserError
from planner.sim.evaluate.baselines.registry import DEFAULT_BASELINES
from planner.sim.evaluate.baselines.registry import names as baseline_names

if TYPE_CHECKING:
    from planner.policy_file import PolicyFile
    from planner.profile import Profile
    from planner.sim.evaluate.backtest import BacktestResult
    from planner.sim.traces.records import RequestTrace


DYNAMO_PREDICTOR_HELP = "dynamo-throughput's load predictor: constant | arima | kalman (Dynamo's own default is arima)"
WARMUP_HELP = ("run the N s of trace before --start-s unscored first, so every policy enters the scored window from "
               "its own state and history")
FRONTIER_HELP = ("also sweep each policy's headroom knob (planner: forecast quantile; dynamo-throughput: "
                 "utilization; dynamo-load: SLA scale; static: x offline peak; reactive: x thresholds); writes "
                 "frontier.json and frontier.png")


ORACLE_INTERVAL_HELP = "deprecated: the offline schedule replaced the per-interval oracle; ignored"


SCENARIO_HELP = ("a suite scenario instead of --trace (planner bench suite --help lists them): its trace at --seed, "
                 "its profile, warm-up and own SLA, as the suite and `planner bench seeds` replay it; --policy "
                 "defaults to the example")
TRACE_HELP = ("trace file; with --fleet, POLICY=FILE once per policy of the fleet, or one csv/jsonl file split by "
              "its model column (--columns ...,model=COL)")
VARY_HELP = ("the policy with these fields set (dotted keys of the policy file, values as YAML, several joined by "
             "';'), e.g. 'pools.prefill.max_replicas=200;pools.decode.max_replicas=200'")
FLEET_HELP = ("fleet YAML: replay every policy on its own trace (--trace POLICY=FILE) under one GPU budget, against "
              "the same planners without it and static pools at each model's peak")
POLICY_HELP = "policy YAML (the policy under test, reported as 'planner')"
PEAK_WINDOW_HELP = "static-yesterday: the averaging window of yesterday's peak (s)"


def backtest_cmd(
    out: Annotated[Path, typer.Option(help="output directory (report.json/.md, timeline.csv, decisions.csv, plots)")],
    trace: Annotated[list[str] | None, typer.Option(help=TRACE_HELP)] = None,
    scenario: Annotated[str | None, typer.Option(help=SCENARIO_HELP)] = None,
    profile: Annotated[Path | None, typer.Option(help="profile JSON (not with --fleet: each policy's own)")] = None,
    policy: Annotated[Path | None, typer.Option(help=POLICY_HELP)] = None,
    fleet: Annotated[Path | None, typer.Option(help=FLEET_HELP)] = None,
    format: Annotated[str, typer.Option("--format", help="azure | mooncake | servegen | csv | jsonl")] = "azure",
    columns: Annotated[str | None, typer.Option(help="csv/jsonl column mapping, e.g. "
                                                "arrival=ts,isl=in,osl=out,time_unit=ms")] = None,
    rate_scale: Annotated[float, typer.Option("--rate-scale", help="multiply the arrival rate by K")] = 1.0,
    scale_mode: Annotated[str, typer.Option("--scale-mode", help="superpose (time-shifted copies) | "
                                            "compress (divide times by K)")] = "superpose",
    startup_s: Annotated[float | None, typer.Option("--startup-s", help="replica start-up seconds "
                                                    "(default: the policy's startup_s)")] = None,
    baselines: Annotated[str, typer.Option(help="comma-separated, from: " + ", ".join(baseline_names())
                                           + " (empty: none)")] = ",".join(DEFAULT_BASELINES),
    kill: Annotated[bool, typer.Option("--kill", help="scale-down kills in-flight work (counted failed) "
                                       "instead of draining")] = False,
    seed: Annotated[int, typer.Option(help="seed for rate scaling and synthesis")] = 0,
    duration_s: Annotated[float | None, typer.Option("--duration-s", help="use only the first N s of the trace")] = None,
    start_s: Annotated[float | None, typer.Option("--start-s", help="skip the first N s of the trace")] = None,
    forecaster: Annotated[str | None, typer.Option(help="override the policy's forecast model")] = None,
    quantile: Annotated[float | None, typer.Option("--quantile", help="override the policy's forecast "
                                                   "quantile (0.5-0.99; for attainment/GPU-hour frontiers)")] = None,
    vary: Annotated[str | None, typer.Option("--vary", metavar="KEY=VALUE[;...]", help=VARY_HELP)] = None,
    oracle_interval_s: Annotated[float | None, typer.Option("--oracle-interval-s", hidden=True,
                                                            help=ORACLE_INTERVAL_HELP)] = None,
    workers: Annotated[int | None, typer.Option(help="processes judging offline-schedule candidates (default: up "
                                                "to 2) and replaying frontier points (default: every core)")] = None,
    offline_simulations: Annotated[int, typer.Option("--offline-simulations", help="full simulations the "
                                                     "offline schedule's search may spend")] = 24,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="skip PNG plots")] = False,
    dynamo_predictor: Annotated[str, typer.Option("--dynamo-predictor", help=DYNAMO_PREDICTOR_HELP)] = "constant",
    warmup_s: Annotated[float, typer.Option("--warmup-s", help=WARMUP_HELP)] = 0.0,
    frontier: Annotated[bool, typer.Option("--frontier", help=FRONTIER_HELP)] = False,
    yesterday: Annotated[Path | None, typer.Option(help="the previous day's trace (same --format, --columns, "
                                                   "--rate-scale) for the static-yesterday baseline")] = None,
    peak_window_s: Annotated[float, typer.Option("--peak-window-s", help=PEAK_WINDOW_HELP)] = 600.0,
    oversized: Annotated[str, typer.Option("--oversized", help=OVERSIZED_HELP)] = "error",
) -> None:
    """Replay a trace under the planner and baselines; compare SLA attainment and GPU-hours."""
    _check_values(seed, rate_scale, start_s, duration_s, warmup_s, peak_window_s, oversized, scenario is not None)
    if scenario is not None:
        _only_without_scenario(trace, fleet, profile, format, columns, rate_scale, scale_mode, start_s, duration_s,
                               warmup_s, yesterday)
        return _backtest_scenario(scenario, policy, quantile, vary, out, startup_s, baselines, kill, seed, forecaster,
                                  workers, offline_simulations, no_plots, dynamo_predictor, frontier, peak_window_s)
    if fleet is not None:
        _only_without_fleet({"--policy": policy, "--profile": profile, "--frontier": frontier or None,
                             "--warmup-s": warmup_s or None, "--yesterday": yesterday, "--quantile": quantile,
                             "--forecaster": forecaster, "--vary": vary})
        return _backtest_fleet(fleet, _required(trace), out, format, columns, rate_scale, scale_mode, seed, start_s,
                               duration_s, startup_s, kill, no_plots, oversized)
    path, policy, profile = _one_policy_args(trace, columns, policy, profile)
    _backtest_one(path, profile, _policy(policy, quantile, vary), out, format, columns, rate_scale, scale_mode, startup_s, baselines,
                  kill, seed, duration_s, start_s, forecaster, workers, offline_simulations, no_plots,
                  dynamo_predictor, warmup_s, frontier, oracle_interval_s, yesterday, peak_window_s, oversized)


# Superposing K copies of a trace makes K times its requests: past this the replay never ends.
MAX_RATE_SCALE = 1000.0


def _check_values(seed: int, rate_scale: float, start_s: float | None, duration_s: float | None, warmup_s: float,
                  peak_window_s: float, oversized: str, scenario: bool) -> None:
    """The values a backtest takes, checked before any trace is read."""
    check_oversized(oversized, scenario)
    check_seed("--seed", seed)
    if not (math.isfinite(rate_scale) and 0 < rate_scale <= MAX_RATE_SCALE):
        raise UserError(f"--rate-scale: {rate_scale:g} must be a finite number > 0 and <= {MAX_RATE_SCALE:g} "
                        "(x K superposes K copies of the trace)")
    seconds("--start-s", start_s, zero=True, most=366 * 86_400.0)
    seconds("--duration-s", duration_s, most=366 * 86_400.0)
    seconds("--warmup-s", warmup_s, zero=True, most=366 * 86_400.0)
    seconds("--peak-window-s", peak_window_s, most=86_400.0)


def _one_policy_args(trace: list[str] | None, columns: str | None, policy: Path | None, profile: Path | None
                     ) -> tuple[Path, Path, Path]:
    """A backtest of one policy: its trace file (one, no model column), --policy and --profile."""
    trace = _required(trace)
    if "model=" in (columns or ""):
        raise UserError("--columns model=...: only with --fleet (it splits one trace among the fleet's policies)")
    missing = [flag for flag, v in (("--policy", policy), ("--profile", profile)) if v is None]
    if missing:
        raise UserError(f"{missing[0]}: required (or --fleet)")
    if len(trace) != 1 or "=" in trace[0] and not Path(trace[0]).exists():
        raise UserError(f"--trace: give one trace file (POLICY=FILE is for --fleet); got {', '.join(trace)}")
    assert policy is not None and profile is not None
    return Path(trace[0]), policy, profile


def _required(trace: list[str] | None) -> list[str]:
    if not trace:
        raise UserError("--trace: required (or --scenario NAME, a suite scenario)")
    return trace


def _only_without_scenario(trace: list[str] | None, fleet: Path | None, profile: Path | None, format: str,
                           columns: str | None, rate_scale: float, scale_mode: str, start_s: float | None,
                           duration_s: float | None, warmup_s: float, yesterday: Path | None) -> None:
    """The flags that choose a trace, its profile or its warm-up: a scenario sets those itself."""
    given = [flag for flag, on in (("--trace", trace is not None), ("--fleet", fleet is not None),
                                   ("--profile", profile is not None), ("--format", format != "azure"),
                                   ("--columns", columns is not None), ("--rate-scale", rate_scale != 1.0),
                                   ("--scale-mode", scale_mode != "superpose"), ("--start-s", start_s is not None),
                                   ("--duration-s", duration_s is not None), ("--warmup-s", warmup_s != 0.0),
                                   ("--yesterday", yesterday is not None)) if on]
    if given:
        raise UserError(f"{given[0]}: not with --scenario (the scenario sets its trace, profile and warm-up)")


def _backtest_fleet(fleet: Path, trace: list[str], out: Path, format: str, columns: str | None, rate_scale: float,
                    scale_mode: str, seed: int, start_s: float | None, duration_s: float | None,
                    startup_s: float | None, kill: bool, no_plots: bool, oversized: str) -> None:
    from planner.commands.fleet_backtest import fleet_backtest

    fleet_backtest(fleet, trace, out, format=format, columns=parse_columns(columns), rate_scale=rate_scale,
                   scale_mode=scale_mode, seed=seed, start_s=start_s, duration_s=duration_s, startup_s=startup_s,
                   kill=kill, no_plots=no_plots, oversized=oversized)


def _only_without_fleet(flags: dict[str, object]) -> None:
    """The flags a fleet's own file sets (each given: not None)."""
    unsupported = [flag for flag, value in flags.items() if value is not None]
    if unsupported:
        raise UserError(f"{unsupported[0]}: not with --fleet (the fleet file names each policy, and its profile)")


def _backtest_one(trace: Path, profile: Path, policy: tuple[PolicyFile, str], out: Path, format: str, columns: str | None,
                  rate_scale: float, scale_mode: str, startup_s: float | None, baselines: str, kill: bool, seed: int,
                  duration_s: float | None, start_s: float | None, forecaster: str | None,
                  workers: int | None, offline_simulations: int, no_plots: bool, dynamo_predictor: str,
                  warmup_s: float, frontier: bool, oracle_interval_s: float | None, yesterday: Path | None,
                  peak_window_s: float, oversized: str = "error") -> None:
    from planner.profile import load_profile
    from planner.sim.traces.loaders import load_requests

    console = out_console()
    prof = load_profile(profile)
    _check_search(console, workers, offline_simulations, oracle_interval_s)
    chosen = [b.strip() for b in baselines.split(",") if b.strip()]
    if yesterday is not None and "static-yesterday" not in chosen:
        chosen.append("static-yesterday")  # a yesterday given is a yesterday to compare with
    if "static-yesterday" in chosen and yesterday is None:
        raise UserError("--baselines: static-yesterday needs the previous day's trace (--yesterday FILE)",
                        key="baselines")
    start_s, duration_s = _with_warmup(warmup_s, start_s, duration_s)
    tr = load_requests(trace, format, columns=parse_columns(columns), rate_scale=rate_scale,
                       scale_mode=scale_mode, seed=seed, start_s=start_s, duration_s=duration_s)
    before = (load_requests(yesterday, format, columns=parse_columns(columns), rate_scale=rate_scale,
                            scale_mode=scale_mode, seed=seed + 1) if yesterday is not None else None)
    meta = {"format": format, "rate_scale": rate_scale, "scale_mode": scale_mode, "seed": seed}
    tr = fit_oversized(console, tr, prof, oversized, meta)
    before = fit_oversized(console, before, prof, oversized, {}) if before is not None else None
    _run(console, tr, prof, policy, out, chosen, before, peak_window_s, startup_s, kill, seed, forecaster, workers,
         offline_simulations, no_plots, dynamo_predictor, warmup_s, frontier, meta)


def _backtest_scenario(name: str, policy_path: Path | None, quantile: float | None, vary: str | None, out: Path,
                       startup_s: float | None, baselines: str, kill: bool, seed: int, forecaster: str | None,
                       workers: int | None, offline_simulations: int, no_plots: bool, dynamo_predictor: str,
                       frontier: bool, peak_window_s: float) -> None:
    """A suite scenario replayed as the suite and ``planner bench seeds`` replay it (its trace at ``seed``, its
    profile, warm-up and own policy fields), with every output of a backtest: what a seed's run looked like."""
    from planner.bench import scenarios

    console = out_console()
    if name not in scenarios.names():
        raise UserError(f"--scenario: unknown {name}; allowed: {', '.join(scenarios.names())}")
    s = scenarios.pick([name])[0]
    scenarios.check_traces([s], None)
    label = policy_path or scenarios.EXAMPLE_POLICY
    pol, text = _policy(label, quantile, vary)
    pol = scenarios.policy_for(s, pol)
    _check_search(console, workers, offline_simulations, None)
    chosen = [b.strip() for b in baselines.split(",") if b.strip()]
    before = scenarios.yesterday_trace(s, scenarios.default_traces_dir(), seed) if "static-yesterday" in chosen else None
    if "static-yesterday" in chosen and before is None:
        raise UserError(f"--baselines: static-yesterday needs a previous day; scenario {name} has none "
                        "(servegen-day has)", key="baselines")
    tr = scenarios.scenario_trace(s, scenarios.default_traces_dir(), seed=seed)
    _run(console, tr, scenarios.scenario_profile(s, pol), (pol, text), out, chosen, before,
         scenarios.peak_window_s(s) if before is not None else peak_window_s, startup_s, kill, seed, forecaster,
         workers, offline_simulations, no_plots, dynamo_predictor, scenarios.warmup_s(s, False), frontier,
         {"format": s.fmt, "rate_scale": s.rate_scale, "scenario": name, "seed": seed})


def _run(console: Console, tr: RequestTrace, prof: Profile, policy: tuple[PolicyFile, str], out: Path,
         chosen: list[str], before: RequestTrace | None, peak_window_s: float, startup_s: float | None, kill: bool,
         seed: int, forecaster: str | None, workers: int | None, offline_simulations: int, no_plots: bool,
         dynamo_predictor: str, warmup_s: float, frontier: bool, meta: dict) -> None:
    from planner.sim.evaluate.backtest import run_backtest
    from planner.sim.evaluate.frontier import offline_seed_quantiles

    pol = policy[0]
    _describe(console, tr, warmup_s)
    t0 = time.perf_counter()
    with phase_progress(console) as progress:
        result = run_backtest(tr, prof, pol, baselines=chosen, yesterday=before, peak_window_s=peak_window_s,
                              startup_s=startup_s, kill=kill, seed=seed, forecaster=forecaster,
                              seed_quantiles=offline_seed_quantiles(pol) if frontier else (),  # see README
                              offline_simulations=offline_simulations,
                              workers=min(2, os.cpu_count() or 1) if workers is None else workers,
                              progress=progress, dynamo_predictor=dynamo_predictor, warmup_s=warmup_s,
                              trace_meta=meta)
    front, result = _frontier(console, result, forecaster, workers, offline_simulations) if frontier else (None, result)
    result.report["timings_s"]["total"] = round(time.perf_counter() - t0, 2)
    result.report["sim"]["policy"] = policy[1]  # the file, and what --vary set on it
    _render(console, result, out, no_plots, front)


def _check_search(console: Console, workers: int | None, offline_simulations: int,
                  oracle_interval_s: float | None) -> None:
    if workers is not None and workers < 1:
        raise UserError(f"--workers: {workers} must be >= 1")
    if offline_simulations < 0:
        raise UserError(f"--offline-simulations: {offline_simulations} must be >= 0")
    if oracle_interval_s is not None:
        console.print("note: --oracle-interval-s is ignored: the offline schedule (every report's reference) "
                      "replaced the per-interval oracle")


def register(app: typer.Typer) -> None:
    app.command("backtest")(backtest_cmd)


def _describe(console: Console, tr: RequestTrace, warmup_s: float) -> None:
    console.print(f"trace: {len(tr):,} requests over {tr.duration_s / 60:.1f} min"
                  + (f", the first {warmup_s / 60:.1f} min unscored warm-up" if warmup_s else "")
                  + (f" ({tr.notes})" if tr.notes else ""))


def _policy(path: Path, quantile: float | None, vary: str | None = None) -> tuple[PolicyFile, str]:
    """The policy file, with ``--vary``'s fields set (as ``planner bench seeds --vary``) and ``--quantile``, and
    the label that names it in the report."""
    from planner.policy_variant import load_variant

    pol, label = load_variant(path, str(path), vary)
    if quantile is None:
        return pol, label
    if not 0.5 <= quantile <= 0.99:  # also rejects NaN
        raise UserError(f"--quantile: {quantile!r} must be between 0.5 and 0.99 (the policy's forecast.quantile range)")
    return pol.model_copy(update={"forecast": pol.forecast.model_copy(update={"quantile": quantile})}), label


def _with_warmup(warmup_s: float, start_s: float | None, duration_s: float | None) -> tuple[float | None, float | None]:
    """The trace window to load: the scored window and, before it, ``--warmup-s`` of warm-up."""
    if warmup_s > (start_s or 0.0):  # a negative or NaN warm-up is rejected by run_backtest
        raise UserError(f"--warmup-s: {warmup_s:g} s of warm-up needs --start-s >= {warmup_s:g} "
                        f"(the warm-up is the trace before --start-s); got --start-s {start_s or 0:g}")
    if warmup_s > 0:
        start_s = (start_s or 0.0) - warmup_s
        duration_s = None if duration_s is None else duration_s + warmup_s
    return start_s, duration_s


def _frontier(console: Console, result: BacktestResult, forecaster: str | None, workers: int | None,
              offline_simulations: int) -> tuple[dict, BacktestResult]:
    """The frontier; when points beat the offline schedule, the schedule searched again from them (the
    result then carries the new reference)."""
    from planner.sim.evaluate.reseed import describe, frontier_reseeded

    t0 = time.perf_counter()
    before = result.report["references"]["offline"]
    with phase_progress(console) as progress:
        front, result = frontier_reseeded(result, forecaster, workers=workers or os.cpu_count() or 1,
                                          progress=lambda done, total: progress("frontier", done, total),
                                          max_simulations=offline_simulations)
    result.report["timings_s"]["frontier"] = round(time.perf_counter() - t0, 2)
    if front.get("reseeded_from"):
        after = result.report["references"]["offline"]
        console.print(describe(front["reseeded_from"], before, after), highlight=False)
    for d in front.get("points_dominating_offline", []):
        console.print(f"[bold red]BROKEN YARDSTICK:[/] {d['policy']} at {d['knob']} {d['value']:g} "
                      f"({d['attainment_joint']:.2%} on {d['gpu_hours']:.2f} GPU-h) beats the offline schedule on "
                      "both axes", highlight=False)
    return front, result


def _render(console: Console, result: BacktestResult, out: Path, no_plots: bool, frontier: dict | None) -> None:
    from planner.sim.evaluate.report import render_markdown, write_report

    paths = write_report(result, out, plots=not no_plots)
    console.print(render_markdown(result.report), markup=False, highlight=False)
    if frontier is not None:
        from planner.sim.evaluate.frontier_report import frontier_markdown, write_frontier

        section = frontier_markdown(frontier)
        with (out / "report.md").open("a") as fh:
            fh.write(section)
        console.print(section, markup=False, highlight=False)
        paths += write_frontier(frontier, out, sla_percentile=result.report["sla"]["percentile"], plot=not no_plots)
    for p in paths:
        console.print(f"wrote {p}")
