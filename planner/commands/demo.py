"""`planner demo`: the whole pipeline on an embedded default, no cluster and no GPU needed.

profile (analytical Qwen3-32B on H200 at the trace's workload) -> what-if plan at the mean and peak load ->
backtest of the embedded Azure conversation trace: the planner against static, reactive (HPA/KEDA-style),
Dynamo's planner (throughput and load modes), with the lower bound and offline schedule, a report and plots.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.rule import Rule

from planner.catalog import example_policy, traces_dir
from planner.commands.console import out_console
from planner.commands.progress import phase_progress
from planner.errors import UserError

RULE_WIDTH = 120  # a section rule piped at full width (planner/commands/console.py) would be a 1000-column line

if TYPE_CHECKING:
    from planner.policy_file import PolicyFile
    from planner.profile import Profile
    from planner.sim.traces.records import RequestTrace


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        out: Annotated[Path, typer.Option(help="output directory")] = Path("out/demo"),
        trace: Annotated[Path | None, typer.Option(help="Azure-format trace (default: the embedded conv trace)")] = None,
        minutes: Annotated[float, typer.Option(help="minutes of the trace to score")] = 20.0,
        warmup_minutes: Annotated[float, typer.Option("--warmup-minutes", help="minutes replayed first, unscored, "
                                                      "so every policy starts from its own state")] = 5.0,
        rate_scale: Annotated[float, typer.Option("--rate-scale", help="arrival-rate multiplier")] = 4.0,
        baselines: Annotated[str, typer.Option(help="comma-separated baselines")] = "static,reactive,dynamo-throughput,dynamo-load",
        no_plots: Annotated[bool, typer.Option("--no-plots", help="skip PNG plots")] = False,
    ) -> None:
        """Profile -> plan -> backtest on the embedded Azure trace; writes a report and plots."""
        import numpy as np

        from planner.commands.args import positive
        from planner.policy_file import load_policy
        from planner.sim.traces.loaders import load_requests

        positive("--minutes", minutes)
        positive("--rate-scale", rate_scale)
        if not 0 <= warmup_minutes < 1e6:
            raise UserError(f"--warmup-minutes: {warmup_minutes:g} must be >= 0")
        console = out_console()
        trace_path = trace or traces_dir() / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
        policy = load_policy(example_policy())
        tr = load_requests(trace_path, "azure", rate_scale=rate_scale, duration_s=(minutes + warmup_minutes) * 60.0)
        isl, osl = int(np.mean(tr.isl)), int(np.mean(tr.osl))

        console.print(Rule("1. profile"), width=min(console.width, RULE_WIDTH))
        profile, profile_path = _profile(console, policy, isl, osl, out)
        policy = policy.model_copy(update={"profile": str(profile_path)})

        console.print(Rule("2. plan (what-if)"), width=min(console.width, RULE_WIDTH))
        _plan(console, policy, profile, tr, isl, osl)

        console.print(Rule("3. backtest"), width=min(console.width, RULE_WIDTH))
        console.print(f"trace: {trace_path.name}, {minutes:g} min scored after a {warmup_minutes:g}-min warm-up, "
                      f"at rate x{rate_scale:g} ({len(tr):,} requests); policy {policy.name}")
        base = [b.strip() for b in baselines.split(",") if b.strip()]
        meta = {"format": "azure", "rate_scale": rate_scale, "scale_mode": "superpose", "seed": 0,
                "path": str(trace_path)}
        paths = _backtest(console, tr, profile, policy, base, meta, out, no_plots, warmup_minutes * 60.0)
        for p in [profile_path, *paths]:
            console.print(f"wrote {p}")


def _profile(console: Console, policy: PolicyFile, isl: int, osl: int, out: Path) -> tuple[Profile, Path]:
    from planner.catalog import load_hardware, load_model
    from planner.profile import save_profile
    from planner.profiler.analytical import profile_analytical
    from planner.profiler.grids import DEFAULT_TP, SweepRequest
    from planner.profiler.report import render

    req = SweepRequest(model="qwen3-32b", gpu="h200", tp=DEFAULT_TP, isl=isl, osl=osl,
                       ttft_ms=policy.sla.ttft_ms, itl_ms=policy.sla.itl_ms, kv_link_gbps=policy.kv_link.gbps)
    profile = profile_analytical(load_model("qwen3-32b"), load_hardware("h200"), req)
    out.mkdir(parents=True, exist_ok=True)
    profile_path = out / "qwen3-32b-h200.json"
    save_profile(profile, profile_path)
    render(profile, console)
    return profile, profile_path


def _plan(console: Console, policy: PolicyFile, profile: Profile, tr: RequestTrace, isl: int, osl: int) -> None:
    from planner.commands.render import render_plan
    from planner.decide.whatif import plan
    from planner.sim.traces.series import minute_counts

    peak = minute_counts(tr).max()
    for label, rate in (("mean", len(tr) / tr.duration_s), ("peak minute", peak / 60.0)):
        console.print(f"{label} load: {rate:.1f} req/s, ISL {isl}, OSL {osl}")
        render_plan(plan(policy, profile, rate, isl, osl), policy, console)


def _backtest(console: Console, tr: RequestTrace, profile: Profile, policy: PolicyFile, base: list[str],
              meta: dict[str, object], out: Path, no_plots: bool, warmup_s: float) -> list[Path]:
    from planner.sim.evaluate.backtest import run_backtest
    from planner.sim.evaluate.report import write_report
    from planner.sim.evaluate.summary_table import render_summary

    with phase_progress(console) as progress:
        result = run_backtest(tr, profile, policy, baselines=base, progress=progress, trace_meta=meta,
                              warmup_s=warmup_s, workers=min(2, os.cpu_count() or 1))
    paths = write_report(result, out / "backtest", plots=not no_plots)
    render_summary(result.report, console)
    console.print(f"SLA: TTFT <= {policy.sla.ttft_ms:g} ms and ITL <= {policy.sla.itl_ms:g} ms; a request counts "
                  f"when it meets both. Full report: {out / 'backtest' / 'report.md'}")
    return paths
