"""`planner backtest` and `planner bench sim`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner.commands.progress import phase_progress
from planner.errors import UserError


def _shared_root() -> Path:
    return Path(__file__).resolve().parents[2].parent / "shared"


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    @app.command("backtest")
    def backtest_cmd(
        trace: Annotated[Path, typer.Option(help="trace file")],
        profile: Annotated[Path, typer.Option(help="profile JSON")],
        policy: Annotated[Path, typer.Option(help="policy YAML (the policy under test, reported as 'planner')")],
        out: Annotated[Path, typer.Option(help="output directory (report.json, report.md, PNG plots)")],
        format: Annotated[str, typer.Option("--format", help="azure | mooncake | servegen | csv | jsonl")] = "azure",
        columns: Annotated[str | None, typer.Option(help="csv/jsonl column mapping, e.g. "
                                                    "arrival=ts,isl=in,osl=out,time_unit=ms")] = None,
        rate_scale: Annotated[float, typer.Option("--rate-scale", help="multiply the arrival rate by K")] = 1.0,
        scale_mode: Annotated[str, typer.Option("--scale-mode", help="superpose (time-shifted copies) | "
                                                "compress (divide times by K)")] = "superpose",
        startup_s: Annotated[float | None, typer.Option("--startup-s", help="replica start-up seconds "
                                                        "(default: the policy's startup_s)")] = None,
        baselines: Annotated[str, typer.Option(help="comma-separated: static,reactive,dynamo-throughput,"
                                               "dynamo-load,oracle,clairvoyant (the planner fed the true future "
                                               "load; empty: none); dynamo-sla: deprecated alias of "
                                               "dynamo-throughput")]
        = "static,reactive,dynamo-throughput,dynamo-load,oracle,clairvoyant",
        kill: Annotated[bool, typer.Option("--kill", help="scale-down kills in-flight work (counted failed) "
                                           "instead of draining")] = False,
        seed: Annotated[int, typer.Option(help="seed for rate scaling and synthesis")] = 0,
        duration_s: Annotated[float | None, typer.Option("--duration-s", help="use only the first N s of the trace")] = None,
        start_s: Annotated[float | None, typer.Option("--start-s", help="skip the first N s of the trace")] = None,
        forecaster: Annotated[str | None, typer.Option(help="override the policy's forecast model")] = None,
        quantile: Annotated[float | None, typer.Option("--quantile", help="override the policy's forecast "
                                                       "quantile (0.5-0.99; for attainment/GPU-hour frontiers)")] = None,
        oracle_interval_s: Annotated[float | None, typer.Option("--oracle-interval-s",
                                                                help="oracle resolution (default max(60, interval))")] = None,
        workers: Annotated[int | None, typer.Option(help="processes for the oracle search")] = None,
        no_plots: Annotated[bool, typer.Option("--no-plots", help="skip PNG plots")] = False,
        dynamo_predictor: Annotated[str, typer.Option("--dynamo-predictor",
                                                      help="dynamo-throughput's load predictor: constant | "
                                                      "arima | kalman (Dynamo's own default is arima)")] = "constant",
        warmup_s: Annotated[float, typer.Option("--warmup-s", help="run the N s of trace before --start-s "
                                                "unscored first, so every policy enters the scored window "
                                                "from its own state and history")] = 0.0,
    ) -> None:
        """Replay a trace under the planner and baselines; compare SLA attainment and GPU-hours."""
        from planner.config import load_policy
        from planner.profile import load_profile
        from planner.sim.backtest import run_backtest
        from planner.sim.report import write_report
        from planner.sim.traces import load_requests, parse_columns

        console = Console()
        base = [b.strip() for b in baselines.split(",") if b.strip()]
        pol = load_policy(policy)
        if quantile is not None:
            if not 0.5 <= quantile <= 0.99:  # also rejects NaN
                raise UserError(f"--quantile: {quantile!r} must be between 0.5 and 0.99 (the policy's forecast.quantile range)")
            pol = pol.model_copy(update={"forecast": pol.forecast.model_copy(update={"quantile": quantile})})
        prof = load_profile(profile)
        if workers is not None and workers < 1:
            raise UserError(f"--workers: {workers} must be >= 1")
        if warmup_s > (start_s or 0.0):  # a negative or NaN warm-up is rejected by run_backtest
            raise UserError(f"--warmup-s: {warmup_s:g} s of warm-up needs --start-s >= {warmup_s:g} "
                            f"(the warm-up is the trace before --start-s); got --start-s {start_s or 0:g}")
        if warmup_s > 0:
            start_s = (start_s or 0.0) - warmup_s
            duration_s = None if duration_s is None else duration_s + warmup_s
        tr = load_requests(trace, format, columns=parse_columns(columns), rate_scale=rate_scale,
                           scale_mode=scale_mode, seed=seed, start_s=start_s, duration_s=duration_s)
        console.print(f"trace: {len(tr):,} requests over {tr.duration_s / 60:.1f} min"
                      + (f", the first {warmup_s / 60:.1f} min unscored warm-up" if warmup_s else "")
                      + (f" ({tr.notes})" if tr.notes else ""))
        t0 = time.perf_counter()
        with phase_progress(console) as progress:
            result = run_backtest(tr, prof, pol, baselines=base, startup_s=startup_s, kill=kill, seed=seed,
                                  forecaster=forecaster, oracle_interval_s=oracle_interval_s, workers=workers,
                                  progress=progress, dynamo_predictor=dynamo_predictor, warmup_s=warmup_s,
                                  trace_meta={"format": format, "rate_scale": rate_scale, "scale_mode": scale_mode,
                                              "seed": seed})
        result.report["timings_s"]["total"] = round(time.perf_counter() - t0, 2)
        paths = write_report(result, out, plots=not no_plots)
        from planner.sim.report import render_markdown

        console.print(render_markdown(result.report), markup=False, highlight=False)
        for p in paths:
            console.print(f"wrote {p}")

    @bench_app.command("sim")
    def bench_sim(
        trace: Annotated[Path | None, typer.Option(help="trace (default: shared Azure conv)")] = None,
        rate_scale: Annotated[float, typer.Option("--rate-scale")] = 10.0,
        profile: Annotated[Path | None, typer.Option(help="profile (default profiles/h200/qwen3-32b.json)")] = None,
        mode: Annotated[str, typer.Option(help="disaggregated | aggregated")] = "disaggregated",
        repeat: Annotated[int, typer.Option(help="runs to time (best is reported)")] = 3,
    ) -> None:
        """Simulated requests per second of the cluster simulator (goal >= 50,000 on 2 cores)."""
        import numpy as np

        from planner.profile import load_profile
        from planner.sim.backtest import fluid_initial
        from planner.sim.cluster import Cluster, SimConfig
        from planner.sim.traces import RequestTrace, load_requests

        console = Console()
        root = Path(__file__).resolve().parents[2]
        path = trace or _shared_root() / "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
        if not path.exists():
            raise UserError(f"{path}: trace not found (pass --trace)")
        if mode not in ("disaggregated", "aggregated"):
            raise UserError(f"--mode: {mode!r}; allowed: disaggregated, aggregated")
        prof = load_profile(profile or root / "profiles/h200/qwen3-32b.json")
        tr = load_requests(path, "azure", rate_scale=rate_scale)
        from planner.config import Policy

        pools = ({"prefill": {"max_replicas": 10_000}, "decode": {"max_replicas": 10_000}} if mode == "disaggregated"
                 else {"aggregated": {"max_replicas": 10_000}})
        pol = Policy.model_validate({"name": "bench", "mode": mode, "profile": "-", "pools": pools})
        # sized for the trace's peak minute so the run is a realistic (not overloaded) cluster
        counts = np.histogram(tr.arrival_s, bins=np.arange(0, tr.duration_s + 60, 60))[0]
        peak_minute = float(np.argmax(counts) * 60.0)
        peak = tr.window(peak_minute, peak_minute + 60.0)
        peak = RequestTrace(peak.arrival_s - peak_minute, peak.isl, peak.osl)
        sizes = fluid_initial(peak, prof, pol, 60.0)
        best = best_cpu = float("inf")
        for _ in range(max(1, repeat)):
            c = Cluster(tr, prof, SimConfig(mode=mode), sizes)
            t0, c0 = time.perf_counter(), time.process_time()
            c.run_until(float("inf"))
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        r = c.results()
        # CPU time too: on a shared machine wall time includes other processes' share of the cores
        console.print(f"sim {mode}: {len(tr):,} requests (Azure conv x{rate_scale:g}), sizes {sizes}: "
                      f"best of {max(1, repeat)}: {best:.2f} s wall -> {len(tr) / best:,.0f} simulated requests/s "
                      f"({len(tr) / best_cpu:,.0f} per CPU-second); "
                      f"TTFT p95 {np.nanpercentile(r['ttft_s'], 95) * 1e3:.0f} ms, "
                      f"ITL p95 {np.nanpercentile(r['itl_mean_s'], 95) * 1e3:.1f} ms")
