"""`planner profile`: sweep TP sizes, pick the best per stage, write a profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner.catalog import load_hardware, load_model
from planner.commands.args import int_list, positive
from planner.errors import InfeasibleError, UserError
from planner.profile import Profile, save_profile
from planner.profiler.backends import get_backend
from planner.profiler.grids import DEFAULT_TP, SweepRequest


def build_request(model: str, gpu: str, tp: str, isl: int, osl: int, ttft_ms: float, itl_ms: float,
                  isl_grid: str | None, batch_grid: str | None, context_grid: str | None,
                  kv_link_gbps: float | None, device: str = "cuda", warmup: int = 3, iters: int = 20) -> SweepRequest:
    for flag, value in (("--isl", isl), ("--osl", osl)):
        if value <= 0:
            raise UserError(f"{flag}: {value} must be > 0")
    positive("--ttft-ms", ttft_ms)
    positive("--itl-ms", itl_ms)
    positive("--kv-link-gbps", kv_link_gbps)
    if warmup < 0 or iters < 1:
        raise UserError(f"--warmup {warmup} / --iters {iters}: need --warmup >= 0 and --iters >= 1")
    tps = int_list("--tp", tp)
    assert tps is not None
    return SweepRequest(model=model, gpu=gpu, tp=tps, isl=isl, osl=osl, ttft_ms=ttft_ms, itl_ms=itl_ms,
                        isl_grid=int_list("--isl-grid", isl_grid), batch_grid=int_list("--batch-grid", batch_grid),
                        context_grid=int_list("--context-grid", context_grid), kv_link_gbps=kv_link_gbps,
                        device=device, warmup=warmup, iters=iters)


def register(app: typer.Typer) -> None:
    @app.command("profile")
    def profile_cmd(
        model: Annotated[str, typer.Option(help="shipped model name (e.g. qwen3-32b) or path to a config.json")],
        gpu: Annotated[str, typer.Option(help="GPU from profiles/hardware.yaml, e.g. h200")] = "h200",
        backend: Annotated[str, typer.Option(help="analytical | torch")] = "analytical",
        tp: Annotated[str, typer.Option(help="TP sizes to sweep, comma-separated")] = ",".join(map(str, DEFAULT_TP)),
        isl: Annotated[int, typer.Option(help="workload input length (tokens)")] = 4000,
        osl: Annotated[int, typer.Option(help="workload output length (tokens)")] = 500,
        ttft_ms: Annotated[float, typer.Option("--ttft-ms", help="TTFT target (ms)")] = 500.0,
        itl_ms: Annotated[float, typer.Option("--itl-ms", help="ITL target (ms)")] = 30.0,
        isl_grid: Annotated[str | None, typer.Option(help="prefill ISL grid, e.g. 128,256,...")] = None,
        batch_grid: Annotated[str | None, typer.Option(help="decode batch grid")] = None,
        context_grid: Annotated[str | None, typer.Option(help="decode context grid")] = None,
        kv_link_gbps: Annotated[float | None, typer.Option("--kv-link-gbps", help="P->D KV link, Gb/s "
                                                           "(default: the GPU's typical NIC)")] = None,
        out: Annotated[Path, typer.Option(help="profile JSON to write")] = Path("profile.json"),
        plots: Annotated[Path | None, typer.Option(help="directory for PNG plots")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print the selection as JSON")] = False,
        device: Annotated[str, typer.Option(help="torch backend: cuda | cpu")] = "cuda",
        warmup: Annotated[int, typer.Option(help="torch backend: untimed runs per point")] = 3,
        iters: Annotated[int, typer.Option(help="torch backend: most timed runs per point (median)")] = 20,
    ) -> None:
        """Sweep TP sizes for prefill and decode, pick the best TP per stage, write a profile."""
        console = Console()
        req = build_request(model, gpu, tp, isl, osl, ttft_ms, itl_ms, isl_grid, batch_grid, context_grid,
                            kv_link_gbps, device, warmup, iters)
        spec = load_model(model)
        hw = load_hardware(gpu)
        for t in req.tp:
            why = spec.check_tp(t)
            if why:
                raise UserError(f"--tp: {why}")
        profile = get_backend(backend)(spec, hw, req)
        save_profile(profile, out)
        if json_out:
            console.print_json(json.dumps(profile.model_dump(mode="json")["selection"]))
        else:
            from planner.profiler.report import render

            render(profile, console)
            console.print(f"wrote {out}")
        if plots is not None:
            from planner.profiler.plots import write_plots

            for path in write_plots(profile, plots):
                console.print(f"wrote {path}")
        _check_selection(profile, out)


def _check_selection(profile: Profile, out: Path) -> None:
    sel = profile.selection
    assert sel is not None
    missing = [s for s in ("prefill", "decode") if not getattr(sel, s).meets_sla]
    if missing:
        detail = "; ".join(f"{s}: {getattr(sel, s).reason}" for s in missing)
        raise InfeasibleError(f"SLA cannot be met ({detail}). The profile was still written to {out}.")
