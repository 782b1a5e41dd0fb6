"""`planner profile`: sweep TP sizes, pick the best per stage, write a profile."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from planner.catalog import load_hardware, load_model
from planner.commands.args import int_list, positive
from planner.commands.console import out_console
from planner.errors import InfeasibleError, UserError
from planner.profile import Profile, save_profile
from planner.profiler.backends import get_backend
from planner.profiler.grids import DEFAULT_K8S_URL, DEFAULT_TP, SweepRequest, measure_defaults
from planner.types import MAX_TOKENS


def build_request(model: str, gpu: str, tp: str, isl: int, osl: int, ttft_ms: float, itl_ms: float,
                  isl_grid: str | None, batch_grid: str | None, context_grid: str | None,
                  kv_link_gbps: float | None, device: str = "cuda", warmup: int = 3, iters: int = 20) -> SweepRequest:
    for flag, value in (("--isl", isl), ("--osl", osl)):
        if not 0 < value <= MAX_TOKENS:
            raise UserError(f"{flag}: {value} must be > 0 and <= {MAX_TOKENS}")
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


Url = Annotated[str | None, typer.Option(help="endpoint: the server's base URL, e.g. http://127.0.0.1:8000")]
ServedModel = Annotated[str | None, typer.Option(help="endpoint/kubernetes: model name at the server "
                                                 "(default: the one it lists)")]
ConcurrencyLimit = Annotated[int | None, typer.Option(help="endpoint/kubernetes: most concurrent streams")]
DecodeTokens = Annotated[int, typer.Option(help="endpoint/kubernetes: tokens per stream while the whole "
                                           "batch decodes")]
RequestTimeout = Annotated[float, typer.Option("--request-timeout-s", help="endpoint/kubernetes: one "
                                               "request's time limit (s)")]
ApiKey = Annotated[str | None, typer.Option(envvar="PLANNER_API_KEY", help="endpoint/kubernetes: bearer token")]
Template = Annotated[Path | None, typer.Option(help="kubernetes: worker Deployment YAML template")]
Namespace = Annotated[str, typer.Option(help="kubernetes: namespace for the workers")]
Engine = Annotated[str | None, typer.Option(help="kubernetes: vllm | sglang (default: from the template)")]
ReadyTimeout = Annotated[float, typer.Option("--ready-timeout-s", help="kubernetes: most seconds a worker may "
                                             "take to become ready")]
Kubeconfig = Annotated[Path | None, typer.Option(help="kubernetes: kubeconfig (default: in-cluster, then "
                                                 "~/.kube/config)")]
ServiceUrl = Annotated[str, typer.Option(help="kubernetes: how to reach a worker's Service "
                                         "({service}, {namespace}, {port}, {tp})")]


def live_options(url: str | None, served_model: str | None, concurrency_limit: int | None, decode_tokens: int,
                 request_timeout_s: float, api_key: str | None, template: Path | None, namespace: str,
                 engine: str | None, ready_timeout_s: float, kubeconfig: Path | None,
                 service_url: str) -> dict[str, object]:
    """The SweepRequest fields of the backends that measure live servers."""
    return {"url": url, "served_model": served_model, "concurrency_limit": concurrency_limit,
            "decode_tokens": decode_tokens, "request_timeout_s": request_timeout_s, "api_key": api_key,
            "template": str(template) if template else None, "namespace": namespace, "engine": engine,
            "ready_timeout_s": ready_timeout_s, "kubeconfig": str(kubeconfig) if kubeconfig else None,
            "service_url": service_url}


def register(app: typer.Typer) -> None:
    @app.command("profile")
    def profile_cmd(
        model: Annotated[str, typer.Option(help="shipped model name (e.g. qwen3-32b) or path to a config.json")],
        gpu: Annotated[str, typer.Option(help="GPU from profiles/hardware.yaml, e.g. h200")] = "h200",
        backend: Annotated[str, typer.Option(help="analytical | torch | endpoint | kubernetes")] = "analytical",
        tp: Annotated[str | None, typer.Option(help="TP sizes to sweep, comma-separated (endpoint: the one the "
                                               f"server runs) [default: {','.join(map(str, DEFAULT_TP))}]")] = None,
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
        warmup: Annotated[int | None, typer.Option(help="measuring backends: untimed runs per point "
                                                   "[default: torch 3, endpoint/kubernetes 1]")] = None,
        iters: Annotated[int | None, typer.Option(help="measuring backends: timed runs per point (median) "
                                                  "[default: torch 20, endpoint/kubernetes 3]")] = None,
        url: Url = None, served_model: ServedModel = None, concurrency_limit: ConcurrencyLimit = None,
        decode_tokens: DecodeTokens = 32, request_timeout_s: RequestTimeout = 600.0, api_key: ApiKey = None,
        template: Template = None, namespace: Namespace = "default", engine: Engine = None,
        ready_timeout_s: ReadyTimeout = 900.0, kubeconfig: Kubeconfig = None, service_url: ServiceUrl = DEFAULT_K8S_URL,
    ) -> None:
        """Sweep TP sizes for prefill and decode, pick the best TP per stage, write a profile."""
        if backend == "endpoint" and tp is None:
            raise UserError("--tp: backend endpoint needs the TP size the server runs, e.g. --tp 1")
        default_warmup, default_iters = measure_defaults(backend)
        req = build_request(model, gpu, ",".join(map(str, DEFAULT_TP)) if tp is None else tp, isl, osl, ttft_ms, itl_ms, isl_grid,
                            batch_grid, context_grid, kv_link_gbps, device,
                            default_warmup if warmup is None else warmup, default_iters if iters is None else iters)
        req = replace(req, **live_options(url, served_model, concurrency_limit, decode_tokens,  # type: ignore[arg-type]
                                          request_timeout_s, api_key, template, namespace, engine, ready_timeout_s,
                                          kubeconfig, service_url))
        _run(backend, req, out, plots, json_out)


def _run(backend: str, req: SweepRequest, out: Path, plots: Path | None, json_out: bool) -> None:
    console = out_console()
    spec = load_model(req.model)
    hw = load_hardware(req.gpu)
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
