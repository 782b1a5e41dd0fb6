"""`planner bench ...`: each command parses its flags and runs one harness from planner/bench/."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner.commands.args import at_least, parse_models, positive, seconds
from planner.commands.args import seed as check_seed
from planner.commands.bench_engines import bench_endpoint, bench_fidelity
from planner.commands.bench_prefill import bench_prefill
from planner.commands.console import out_console
from planner.errors import UserError
from planner.types import Mode


def bench_profile(
    repeat: Annotated[int, typer.Option(help="sweeps to time")] = 20,
    measurements: Annotated[Path | None, typer.Option(help="measurement JSON to score against")] = None,
) -> None:
    """Full default sweep time and the analytical model's error against real H200 measurements."""
    from planner.bench import profile

    at_least("--repeat", repeat, 1)
    if measurements is not None and not measurements.is_file():
        raise UserError(f"--measurements: {measurements} not found (a measurement JSON, e.g. "
                        "profiles/measurements/h200/qwen3-8b.json)")
    profile.run(out_console(), repeat, measurements)


def bench_sim(
    trace: Annotated[Path | None, typer.Option(help="trace (default: the shipped Azure conv)")] = None,
    rate_scale: Annotated[float, typer.Option("--rate-scale")] = 10.0,
    profile: Annotated[Path | None, typer.Option(help="profile (default profiles/h200/qwen3-32b.json)")] = None,
    mode: Annotated[str, typer.Option(help=" | ".join(Mode))] = Mode.DISAGGREGATED.value,
    repeat: Annotated[int, typer.Option(help="runs to time (best is reported)")] = 3,
) -> None:
    """Simulated requests per second of the cluster simulator (goal >= 50,000 on 2 cores)."""
    from planner.bench import sim

    at_least("--repeat", repeat, 1)
    path = trace or sim.DEFAULT_TRACE
    if not path.exists():
        raise UserError(f"{path}: trace not found (pass --trace)")
    sim.run(out_console(), path, rate_scale, profile or sim.DEFAULT_PROFILE, mode, repeat)


def bench_decide(
    policy: Annotated[Path | None, typer.Option(help="policy YAML (default: the shipped policies/example.yaml)")] = None,
    ticks: Annotated[int, typer.Option(help="decide() calls per scenario")] = 5000,
) -> None:
    """decide() latency over a day of varying load (goal: p99 <= 1 ms)."""
    from planner.bench import decide
    from planner.catalog import example_policy

    if ticks < 10:
        raise UserError(f"--ticks: {ticks} must be >= 10")
    decide.run(out_console(), policy or example_policy(), ticks)


def bench_forecast(
    models: Annotated[str | None, typer.Option("--models", help="comma-separated model names")] = None,
    ticks: Annotated[int, typer.Option(help="control ticks to time per model")] = 300,
    history_s: Annotated[float, typer.Option("--history-s", help="history per tick (s); the "
                                             "policy default is 6 h")] = 6 * 3600.0,
    step_s: Annotated[float, typer.Option("--step-s", help="tick interval (s)")] = 30.0,
    horizon_s: Annotated[float, typer.Option("--horizon-s", help="start-up + interval (s)")] = 150.0,
    held_out: Annotated[bool, typer.Option("--held-out", help="instead of latency: auto's MASE, last-value's "
                                           "and their ratio per series auto was never tuned on")] = False,
    traces: Annotated[Path | None, typer.Option("--traces", help="with --held-out: the traces folder "
                                                "(azure2023/, servegen/; default: the shipped profiles/traces)")] = None,
    which: Annotated[str, typer.Option("--set", help="with --held-out: real | synthetic | training | all")] = "real",
    workers: Annotated[int, typer.Option(help="with --held-out: processes")] = os.cpu_count() or 1,
    out: Annotated[Path | None, typer.Option("--out", help="with --held-out: write the rows as JSON")] = None,
) -> None:
    """Fit + forecast latency per series and per control tick (5 series x 2 horizons), sliding history;
    with --held-out, auto against last-value on held-out series (target: ratio <= 1.000 on every one)."""
    from planner.bench import forecast

    positive("--history-s", history_s)
    seconds("--step-s", step_s, least=0.1, most=86_400.0)
    seconds("--horizon-s", horizon_s)
    if held_out:
        if workers < 1:
            raise UserError(f"--workers: {workers} must be >= 1")
        console = out_console()
        from planner.catalog import traces_dir

        report = forecast.held_out(Console(width=max(console.width, 110)), traces or traces_dir(), which, workers)
        if out is not None:
            out.write_text(json.dumps(report, indent=2) + "\n")
        return
    if ticks < 1:
        raise UserError(f"--ticks: {ticks} must be >= 1")
    names = parse_models(models) if models else list(forecast.DEFAULT_MODELS)
    forecast.run(out_console(), names, ticks, history_s, step_s, horizon_s)


def bench_observe(
    prometheus: Annotated[str | None, typer.Option("--prometheus", help="existing Prometheus; default: "
                                                   "start one with two emulated pools")] = None,
    policy: Annotated[Path | None, typer.Option(help="policy YAML (pools, selectors, dialect)")] = None,
    reads: Annotated[int, typer.Option(help="reads to time")] = 200,
    window_s: Annotated[float, typer.Option("--window-s")] = 60.0,
) -> None:
    """Observation read latency (p50/p99) for one policy against a real Prometheus."""
    from planner.bench import observe
    from planner.testing.local_prometheus import prometheus_binary

    if reads < 1:
        raise UserError(f"--reads {reads}: must be >= 1")
    seconds("--window-s", window_s)
    if prometheus is None and prometheus_binary() is None:
        raise UserError("no prometheus binary: apt-get install -y prometheus, or pass --prometheus URL")
    observe.run(out_console(), prometheus, policy, reads, window_s)


# The suite's scenario and trace flags, shared by `bench suite` and `bench seeds`.
SCENARIOS_HELP = ("comma-separated subset (default: azure-conv, azure-code, servegen, servegen-day, long-lognormal, "
                  "chat-docs; named only: clumped-long, a stand-in for issue 27's held-out conversation case)")
SUITE_SCENARIOS_HELP = SCENARIOS_HELP[:-1] + "; and the fleets of eight models on one GPU budget: fleet, fleet-day)"
TRACES_HELP = "folder holding azure2023/ and servegen/ (default: the shipped profiles/traces)"


def scenario_names(text: str | None) -> list[str] | None:
    """``--scenarios a,b`` -> names; None (not given): every scenario. An empty list is a mistake, not "all"."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"--scenarios {text!r}: expected a comma-separated list of scenario names (leave the "
                        "flag out for all)")
    return names


def bench_suite(
    quick: Annotated[bool, typer.Option("--quick", help="short windows and fewer frontier points (CI, minutes)")] = False,
    scenarios: Annotated[str | None, typer.Option(help=SUITE_SCENARIOS_HELP)] = None,
    traces: Annotated[Path | None, typer.Option(help=TRACES_HELP)] = None,
    out: Annotated[Path, typer.Option(help="output folder: suite.json and a report per scenario")] = Path("out/suite"),
    workers: Annotated[int | None, typer.Option(help="worker processes (default: every core)")] = None,
    policy: Annotated[Path | None, typer.Option(help="a policy to compare instead of policies/example.yaml (its "
                                                "profile is still swapped per scenario)")] = None,
) -> None:
    """Every scenario (Azure conv and code, ServeGen over an hour and a day, two heavy-tailed synthetic mixes)
    backtested with the planner's and Dynamo's frontiers, and the fleet of eight models on one GPU budget over the
    hour and the day; prints the tables and the targets, writes suite.json."""
    import os

    from planner.bench import suite, suite_table
    from planner.bench.scenarios import default_traces_dir
    from planner.bench.scenarios import scenario_policy as suite_policy

    if workers is not None and workers < 1:
        raise UserError(f"--workers: {workers} must be >= 1")
    names = scenario_names(scenarios)
    if traces is not None and not traces.is_dir():
        raise UserError(f"--traces: {traces} is not a folder")
    if policy is not None:
        suite_policy(policy)  # a bad file is one line and exit 2 before anything runs
    n = workers or os.cpu_count() or 1
    command = " ".join(["planner bench suite", *(["--quick"] if quick else []),
                        *([f"--policy {policy}"] if policy else []),
                        *([f"--scenarios {scenarios}"] if scenarios else []),
                        *([f"--traces {traces}"] if traces else []), f"--out {out}",
                        *([f"--workers {workers}"] if workers else [])])
    console = out_console()
    doc = suite.run(console, names, quick, traces or default_traces_dir(), out, n, command, policy)
    suite_table.render(console, doc)
    console.print(f"wrote {out / 'suite.json'}")


def bench_seeds(
    policy: Annotated[list[Path] | None, typer.Option(metavar="FILE", help="a policy to replay (repeat the flag to "
                                                      "compare; the first is the reference; default: "
                                                      "policies/example.yaml)")] = None,
    seeds: Annotated[int, typer.Option(help="seeds 0 .. N-1 of each scenario's arrivals")] = 5,
    scenarios: Annotated[str | None, typer.Option(help=SCENARIOS_HELP)] = None,
    traces: Annotated[Path | None, typer.Option(help=TRACES_HELP)] = None,
    out: Annotated[Path, typer.Option(help="JSON results; the plot is written beside it (.png)")] = Path("out/seeds.json"),
    workers: Annotated[int | None, typer.Option(help="worker processes (default: every core)")] = None,
    vary: Annotated[list[str] | None, typer.Option(
        metavar="KEY=VALUE[;...]", help="a variant of the first policy with these fields set, e.g. "
        "'behavior.tolerance=0.1' or 'forecast.model=ewma;forecast.quantile=0.9' (repeat for more variants)")] = None,
    search: Annotated[int, typer.Option(help="also N variants of the first policy drawn at random from --grid, "
                                        "ranked after the runs")] = 0,
    grid: Annotated[Path | None, typer.Option(help="--search's grid: dotted policy keys -> values to try (YAML; "
                                              "default: the shipped policies/search/knobs.yaml)")] = None,
    search_seed: Annotated[int, typer.Option("--search-seed", help="--search's draws (the same seed, grid and N: "
                                             "the same variants)")] = 0,
) -> None:
    """The planner alone on every suite scenario under several arrival seeds, per policy: whether a policy
    change is a gain or one seed's luck (attainment mean and worst, runs below the SLA, GPU-hours ratio); with
    --search, whether some combination of the knobs in --grid is cheaper."""
    from planner.bench import knob_search
    from planner.bench import seeds as study
    from planner.bench.scenarios import default_traces_dir

    if seeds < 1 or seeds > 100:
        raise UserError(f"--seeds: {seeds} must be in 1..100")
    if workers is not None and workers < 1:
        raise UserError(f"--workers: {workers} must be >= 1")
    if traces is not None and not traces.is_dir():
        raise UserError(f"--traces: {traces} is not a folder")
    knob_search.check(search, search_seed)
    reference, sources = _seed_sources(policy, vary, search, grid, search_seed)
    names = scenario_names(scenarios)
    command = " ".join(["planner bench seeds", *(f"--policy {p}" for p in policy or ()),
                        *(f"--vary {shlex.quote(v)}" for v in vary or ()), f"--seeds {seeds}",
                        *([f"--search {search} --search-seed {search_seed}"] if search else []),
                        *([f"--grid {grid}"] if search and grid else []),
                        *([f"--scenarios {scenarios}"] if scenarios else []),
                        *([f"--traces {traces}"] if traces else []), f"--out {out}",
                        *([f"--workers {workers}"] if workers else [])])
    console = out_console()
    runs = study.run(console, sources, names, list(range(seeds)), traces or default_traces_dir(),
                     workers or os.cpu_count() or 1)
    shares = {label: study.load(label, source).sla.percentile / 100.0 for label, source in sources.items()}
    sla_share = shares[reference]
    rows = study.summary(runs, sla_share, shares)
    console.print(study.table(rows, sla_share))
    _print_seed_targets(console, rows)
    ranked = knob_search.ranking(rows, reference) if search else None
    if ranked is not None:
        console.print(knob_search.ranking_table(ranked, top=15))
    study.write(out, runs, rows, command, None if ranked is None else {
        "grid": str(knob_search.grid_path(grid)), "n": search, "seed": search_seed, "ranking": ranked})
    console.print(f"wrote {out} and {study.plot(out.with_suffix('.png'), runs, sla_share)}")


def _seed_sources(policy: list[Path] | None, vary: list[str] | None, search: int, grid: Path | None,
                  search_seed: int) -> tuple[str, dict]:
    """The reference's label and every compared policy by label: each --policy, then each --vary and --search's
    draws as variants of the first."""
    from planner.bench import knob_search
    from planner.policy_variant import PolicySource, variant_label, vary_assignments

    paths: list[Path | None] = list(policy) if policy else [None]
    labels = [str(p) if p is not None else "policies/example.yaml" for p in paths]
    if len(set(labels)) != len(labels):
        raise UserError(f"--policy: {', '.join(labels)}: each policy once")
    sources = {label: PolicySource(path) for label, path in zip(labels, paths, strict=True)}
    drawn = knob_search.variants(sources[labels[0]], labels[0], grid, search, search_seed) if search else []
    for text in [*(vary or ()), *(t for t in drawn if t not in (vary or ()))]:
        label = variant_label(labels[0], text)
        if label in sources:
            raise UserError(f"--vary: {text!r}: each variant once")
        sources[label] = PolicySource(paths[0], vary_assignments(text))
    return labels[0], sources


def _print_seed_targets(console: Console, rows: list[dict]) -> None:
    """The seeds target, met or missed, and each (scenario, policy) that missed it."""
    from planner.bench import seeds as study

    missed = study.target_lines(rows)
    console.print(f"target (no seed below the SLA's percentile less {study.SEED_SLACK:.1%} points): "
                  + ("[green]met[/] by every scenario and policy" if not missed else f"[red]missed[/] by {len(missed)}"),
                  highlight=False)
    for line in missed:
        console.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)  # a variant's label has [...]


def bench_hours(
    policy: Annotated[Path | None, typer.Option(metavar="FILE", help="the policy (default: policies/example.yaml)")] = None,
    vary: Annotated[str | None, typer.Option(metavar="KEY=VALUE[;...]", help="the policy with these fields set, "
                                             "e.g. 'sla.lean_quantile=0.7'")] = None,
    every_h: Annotated[int, typer.Option("--every-h", help="hours between scored hours")] = 7,
    first_h: Annotated[int, typer.Option("--first-h", help="the first scored hour (hours into the trace)")] = 1,
    scale: Annotated[float, typer.Option(help="ServeGen's rates times this (the suite's servegen: 0.09)")] = 0.09,
    quick: Annotated[bool, typer.Option("--quick", help="2 hours, 15 minutes scored each, fewer offline simulations (CI)")] = False,
    traces: Annotated[Path | None, typer.Option(help=TRACES_HELP)] = None,
    out: Annotated[Path, typer.Option(help="JSON results; the plot is written beside it (.png)")] = Path("out/hours.json"),
    workers: Annotated[int | None, typer.Option(help="worker processes (default: every core)")] = None,
) -> None:
    """The policy on hours of ServeGen's fortnight the suite never scores, each a backtest against static, the
    perfect forecast, Dynamo's throughput mode and the offline schedule: does it meet the SLA and stay under static
    where it was not tuned?"""
    from planner.bench import hours as study
    from planner.bench.scenarios import EXAMPLE_POLICY, check_traces, default_traces_dir, pick
    from planner.policy_variant import load_variant

    hours = _check_hours_args(every_h, first_h, scale, workers, quick)
    folder = traces or default_traces_dir()
    check_traces(pick([study.SCENARIO]), folder)
    pol, _ = load_variant(policy or EXAMPLE_POLICY, str(policy or "policies/example.yaml"), vary)
    command = " ".join(["planner bench hours", *([f"--policy {policy}"] if policy else []),
                        *([f"--vary {shlex.quote(vary)}"] if vary else []), f"--every-h {every_h}",
                        f"--first-h {first_h}", f"--scale {scale:g}", *(["--quick"] if quick else []),
                        *([f"--traces {traces}"] if traces else []), f"--out {out}",
                        *([f"--workers {workers}"] if workers else [])])
    console = out_console()
    results = study.run(console, pol, hours, scale, quick, folder,
                        workers or os.cpu_count() or 1)
    sla_share = pol.sla.percentile / 100.0
    doc = study.summary(results, sla_share)
    console.print(study.table(results, sla_share))
    for line in study.summary_lines(doc):
        console.print(line, highlight=False)
    study.write(out, results, doc, command, scale)
    console.print(f"wrote {out} and {study.plot(out.with_suffix('.png'), results, sla_share)}")


def _check_hours_args(every_h: int, first_h: int, scale: float, workers: int | None, quick: bool) -> list[int]:
    from planner.bench import hours as study

    if every_h < 1:
        raise UserError(f"--every-h: {every_h} must be >= 1")
    if not 1 <= first_h < study.SPAN_H:
        raise UserError(f"--first-h: {first_h} must be in 1..{study.SPAN_H - 1} (the warm-up needs the hour before)")
    if not (0 < scale <= 10):  # also rejects NaN
        raise UserError(f"--scale: {scale!r} must be in (0, 10]")
    if workers is not None and workers < 1:
        raise UserError(f"--workers: {workers} must be >= 1")
    return study.starts(first_h, every_h, quick)


# `planner bench fleet --alone`'s options (planner/bench/fleet_alone.py).
AloneOpt = Annotated[str | None, typer.Option("--alone", metavar="MODEL", help="one model's planner alone (no fleet, "
                                              "no static pools) over --seeds draws, e.g. code-large: a policy "
                                              "change judged on many draws; writes alone.json")]
AloneSeedsOpt = Annotated[int, typer.Option("--seeds", min=1, max=100, help="with --alone: draws --seed .. --seed+N-1")]
AloneWorkersOpt = Annotated[int | None, typer.Option("--workers", min=1, help="with --alone: worker processes "
                                                     "(default: every core)")]
FleetPolicyOpt = Annotated[Path | None, typer.Option("--policy", metavar="FILE", help="the policy every model runs "
                                                    "(default: policies/example.yaml; the code-shaped models on the "
                                                    "suite's code profile)")]
AloneVaryOpt = Annotated[str | None, typer.Option("--vary", metavar="KEY=VALUE[;...]", help="with --alone: these "
                                                  "fields set on the model's policy, e.g. 'sla.recover_hold_s=0'")]


def bench_fleet_cmd(
    quick: Annotated[bool, typer.Option("--quick", help="20 minutes of trace instead of an hour (CI)")] = False,
    traces: Annotated[Path | None, typer.Option(help=TRACES_HELP)] = None,
    out: Annotated[Path, typer.Option(help="output folder: report.json and report.md")] = Path("out/fleet"),
    budget_gpus: Annotated[int | None, typer.Option("--budget-gpus", help="the fleet's GPU budget (default: "
                                                     "the benchmark's, sized to bind during the burst: 44, "
                                                     "--no-zero 56)")] = None,
    seed: Annotated[int, typer.Option(help="seed of the models' trace draws")] = 0,
    zero: Annotated[bool, typer.Option("--zero/--no-zero", help="the sparse models scale to zero between their "
                                       "busy windows (min_replicas 0)")] = True,
    idle_s: Annotated[float | None, typer.Option("--idle-s", min=0.0, help="the sparse models' idle window "
                                                 "(scale_to_zero_after_s) in seconds (default 180)")] = None,
    wake_first: Annotated[bool, typer.Option("--wake-first/--no-wake-first", help="fleet.yaml's budget.wake_first: "
                                             "a sleeping model with held requests wakes before any priority grows")
                          ] = True,
    wake_after_s: Annotated[float | None, typer.Option("--wake-after-s", min=0.0, max=3600.0, help="fleet.yaml's "
                                                       "budget.wake_after_s: how long a sleeping model's traffic "
                                                       "waits for its priority before it wakes first (default 120)")] = None,
    day: Annotated[bool, typer.Option("--day", help="the same fleet over a whole day: every model's arrivals follow "
                                      "ServeGen m-large's day 2 (the suite's servegen-day), its busiest 10 minutes "
                                      "at the hour's rate")] = False,
    compress: Annotated[float | None, typer.Option("--compress", min=1.0, max=96.0, help="with --day: the day played "
                                                   "this many times faster (default 1: as recorded, 7 minutes a run "
                                                   "on 2 cores; 8: 3 hours of simulated time, 40 s)")] = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="skip fleet.png")] = False,
    policy: FleetPolicyOpt = None,
    alone: AloneOpt = None,
    seeds: AloneSeedsOpt = 1,
    workers: AloneWorkersOpt = None,
    vary: AloneVaryOpt = None,
) -> None:
    """Eight models on one GPU budget (two large Azure conv/code ones, a burst, five sparse ones) over the Azure
    hour or, with --day, a whole day: per model attainment and GPU-hours, the fleet's GPU-hours and peak against
    its budget, against the same planners without a shared budget and static pools at each model's peak;
    writes report.json, report.md and fleet.png."""
    import time

    from planner.bench import fleet as fb
    from planner.commands.progress import phase_progress
    from planner.sim.evaluate.fleet_backtest import run_fleet_backtest

    check_seed("--seed", seed)
    _check_fleet_args(traces, compress, day, policy)
    squeeze = fb.DAY_COMPRESS if compress is None else compress
    if alone is not None:
        return _fleet_alone(out, alone, seed, seeds, workers, quick, day, squeeze, traces, zero, idle_s, vary, policy)
    if seeds != 1 or workers is not None or vary is not None:
        raise UserError("--seeds/--workers/--vary: only with --alone MODEL (a fleet run is one draw: --seed)")
    fleet, model_traces = fb.bench_fleet(quick, traces, budget_gpus, seed, zero, fb.IDLE_S if idle_s is None else idle_s,
                                         wake_first, wake_after_s, day, squeeze, policy)
    console = Console()
    t0 = time.perf_counter()
    with phase_progress(console) as progress:
        result = run_fleet_backtest(fleet, model_traces, warmup_s=fb.fleet_warmup(quick), progress=progress)
    result.report.update(fb.trace_notes(quick, day, squeeze), timings_s={"total": round(time.perf_counter() - t0, 2)},
                         command=fb.fleet_command(quick, budget_gpus, seed, zero, idle_s, wake_first, wake_after_s, day,
                                                  compress, policy))
    _write_fleet(console, out, result, fleet, model_traces, not no_plots)


def _check_fleet_args(traces: Path | None, compress: float | None, day: bool, policy: Path | None) -> None:
    """`planner bench fleet`'s arguments that can be wrong before anything runs: one line and exit 2."""
    from planner.policy_file import load_policy

    if traces is not None and not traces.is_dir():
        raise UserError(f"--traces: {traces} is not a folder")
    if compress is not None and not day:
        raise UserError("--compress: only with --day (the hour is played as recorded)")
    if policy is not None:
        load_policy(policy)


def _fleet_alone(out: Path, name: str, seed: int, seeds: int, workers: int | None, quick: bool, day: bool,
                 compress: float, traces: Path | None, zero: bool, idle_s: float | None, vary: str | None,
                 policy: Path | None = None) -> None:
    """``--alone``: one model's planner over ``seeds`` draws; a table, its summary and ``out``/alone.json."""
    import os

    from rich.table import Table

    from planner.bench.fleet import IDLE_S
    from planner.bench.fleet_alone import AloneDraw, alone_draws, alone_summary, check_model, check_vary

    check_model(name)
    assignments = check_vary(vary, policy)
    draws = [AloneDraw(name, s, quick, day, compress, traces, zero, IDLE_S if idle_s is None else idle_s, assignments,
                       policy) for s in range(seed, seed + seeds)]
    console = Console()
    with console.status(f"{name} alone over {seeds} draw(s)"):
        runs = alone_draws(draws, workers or os.cpu_count() or 1)
    table = Table(title=f"{name} alone ({'the day' if day else 'the hour'}{' quick' if quick else ''})"
                        f"{f' [{vary}]' if vary else ''}")
    for col in ("seed", "joint attainment", "GPU-h", f"met p{runs[0]['percentile']:g}"):
        table.add_column(col, justify="right")
    for r in runs:
        att = r["attainment_joint"]
        table.add_row(str(r["seed"]), "-" if att is None else f"{att:.2%}", f"{r['gpu_hours']:.2f}",
                      "yes" if r["met"] else "no")
    console.print(table)
    summary = alone_summary(runs)
    worst = summary["worst"]
    console.print(f"worst {'-' if worst is None else f'{worst:.2%}'}, {summary['below']} of {len(runs)} below "
                  f"the percentile, {summary['gpu_hours_mean']} GPU-h mean")
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["planner bench fleet", f"--alone {name}", *([f"--policy {policy}"] if policy else []),
                        f"--seed {seed}", f"--seeds {seeds}",
                        *(["--quick"] if quick else []), *(["--day"] if day else []),
                        *([f"--compress {compress:g}"] if day and compress != 1 else []),
                        *([f"--vary {shlex.quote(vary)}"] if vary else [])])
    (out / "alone.json").write_text(json.dumps({"command": command, "model": name, "runs": runs,
                                                "summary": summary}, indent=1))
    console.print(f"wrote {out / 'alone.json'}")


def _write_fleet(console: Console, out: Path, result: Any, fleet: Any, model_traces: dict,  # noqa: ANN401
                 plots: bool) -> None:
    """report.json, report.md (printed too) and, with ``plots``, fleet.png under ``out``."""
    from planner.sim.evaluate.fleet_report import write_fleet_report

    md, paths = write_fleet_report(out, result, fleet, model_traces, plots)
    console.print(md, markup=False, highlight=False)
    console.print("\n".join(f"wrote {p}" for p in paths))


def register(bench_app: typer.Typer) -> None:
    bench_app.command("fleet")(bench_fleet_cmd)
    bench_app.command("profile")(bench_profile)
    bench_app.command("sim")(bench_sim)
    bench_app.command("decide")(bench_decide)
    bench_app.command("forecast")(bench_forecast)
    bench_app.command("observe")(bench_observe)
    bench_app.command("suite")(bench_suite)
    bench_app.command("seeds")(bench_seeds)
    bench_app.command("hours")(bench_hours)
    bench_app.command("endpoint")(bench_endpoint)
    bench_app.command("fidelity")(bench_fidelity)
    bench_app.command("prefill")(bench_prefill)
