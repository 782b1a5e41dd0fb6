"""`planner profile --backend torch`: measure a random-weight decoder with the model's shapes on real GPUs.

PyTorch is an optional extra (``pip install 'planner[torch]'``); it is imported only when this backend
runs. Without it, or when ``--device cuda`` finds no GPU, the command says so in one line (exit 2).
TP 1 runs in this process; TP > 1 spawns one process per GPU (planner.profiler.torch_worker). A TP size
larger than the machine's GPU count is left out and named in the provenance notes. The result goes
through planner.profiler.assemble, so selection, advice and the format are the analytical backend's.

Set ``PLANNER_TORCH_RAW_LOG=path`` to append every measured point as a JSON line while the sweep runs:
a run cut short still leaves its numbers behind.
"""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from planner.errors import UserError
from planner.perf import roofline
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profile import Profile
from planner.profiler.assemble import RawSweep, assemble
from planner.profiler.grids import SweepRequest

RAW_LOG_ENV = "PLANNER_TORCH_RAW_LOG"
METHOD = ("random-weight decoder with the model's shapes (no download); prefill: one request, eager, causal "
          "flash attention (SDPA), median of timed runs with CUDA events; decode: one step over a full KV "
          "cache (GQA SDPA), captured in a CUDA graph, median replay time; TP>1: one process per GPU, "
          "column/row-parallel QKV/O and gate-up/down, 2 NCCL all-reduces per layer; KV capacity: free memory "
          "after the weights x utilisation - reserve")


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UserError("backend torch needs PyTorch, which is not installed; install the extra: "
                        "pip install 'planner[torch]'", key="backend") from None
    return torch


def resolve_device(torch: Any, device: str) -> str:
    """'cpu' or 'cuda:0'; a one-line UserError when the device cannot be used."""
    kind = device.split(":")[0]
    if kind == "cpu":
        return "cpu"
    if kind != "cuda":
        raise UserError(f"device {device!r}: allowed: cuda, cpu", key="device")
    if not torch.cuda.is_available():
        raise UserError(f"device cuda: no CUDA GPU visible to PyTorch {torch.__version__} "
                        f"(CUDA build: {torch.version.cuda or 'none'}); run on a GPU machine or use device cpu",
                        key="device", mentions=("device",))
    return "cuda:0"


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - optional probe; fall back to nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def software_info(torch: Any, device: str, req: SweepRequest) -> dict[str, str]:
    info = {"torch": str(torch.__version__), "python": platform.python_version(), "device": device,
            "dtype": "bfloat16" if device.startswith("cuda") else "float32",
            "warmup": str(req.warmup), "iters": str(req.iters), "include_lm_head": str(req.include_lm_head).lower()}
    if device.startswith("cuda"):
        info.update(gpu=torch.cuda.get_device_name(0), gpus_visible=str(torch.cuda.device_count()),
                    cuda=str(torch.version.cuda), driver=_driver_version(),
                    cudnn=str(torch.backends.cudnn.version()), nccl=".".join(map(str, torch.cuda.nccl.version())))
    else:
        info.update(gpu="none (cpu)", cpu=platform.processor() or platform.machine())
    return info


def _raw_logger() -> Callable[[str, dict[str, Any]], None] | None:
    path = os.environ.get(RAW_LOG_ENV)
    if not path:
        return None
    import json

    def log(kind: str, data: dict[str, Any]) -> None:
        with open(path, "a") as f:
            f.write(json.dumps({"kind": kind, **data}) + "\n")

    return log


def runnable_tps(torch: Any, device: str, tps: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(TP sizes this machine can run, those it cannot): on GPUs a TP needs that many devices."""
    if not device.startswith("cuda"):
        return list(tps), []
    n = torch.cuda.device_count()
    return [t for t in tps if t <= n], [t for t in tps if t > n]


def _check_request(model: ModelSpec, req: SweepRequest) -> None:
    if req.warmup < 0 or req.iters < 1:
        raise UserError(f"warmup {req.warmup} / iters {req.iters}: need warmup >= 0 and iters >= 1",
                        key="warmup", mentions=("warmup", "iters"))
    if model.is_moe or model.kv_lora_rank:
        raise UserError(f"model {model.name}: the torch backend builds dense GQA decoders only (no MoE, no MLA)",
                        key="model")


def profile_torch(model: ModelSpec, hw: HardwareSpec, req: SweepRequest) -> Profile:
    torch = _import_torch()
    from planner.profiler.torch_measure import MeasureConfig, RankResult, measure_rank

    _check_request(model, req)
    device = resolve_device(torch, req.device)
    isl_grid, batch_grid, ctx_grid = req.grids(model.max_context_tokens)
    tps, missing = runnable_tps(torch, device, req.tp)
    if not tps:
        raise UserError(f"tp {','.join(map(str, req.tp))}: this machine has {torch.cuda.device_count()} GPU(s); "
                        "pass TP sizes up to that", key="tp")
    err = Console(stderr=True)
    if missing:
        err.print(f"torch backend: skipping TP {', '.join(map(str, missing))} "
                  f"(only {torch.cuda.device_count()} GPU(s) here)")
    cfg = MeasureConfig(device=device, warmup=req.warmup, iters=req.iters, include_lm_head=req.include_lm_head,
                        memory_utilization=roofline.CALIBRATED.memory_utilization,
                        reserve_bytes=roofline.CALIBRATED.reserve_bytes, memory_bytes_hint=hw.memory_bytes)
    raw = _raw_logger()
    results: list[RankResult] = []
    failed: list[str] = []
    per_tp = len(isl_grid) + len(batch_grid) * len(ctx_grid)
    with Progress(console=err, transient=True) as progress, tempfile.TemporaryDirectory() as tmp:
        task = progress.add_task(f"torch sweep {model.name}", total=per_tp * len(tps))

        def on_point(kind: str, data: dict[str, Any]) -> None:
            progress.advance(task)
            if raw:
                raw(kind, {"model": model.name, **data})

        for tp in tps:
            done = progress.tasks[0].completed
            try:
                if tp == 1:
                    result = measure_rank(model, 1, isl_grid, batch_grid, ctx_grid, cfg, on_point=on_point)
                else:
                    from planner.profiler.torch_worker import measure_tp

                    result = measure_tp(model, tp, list(isl_grid), list(batch_grid), list(ctx_grid), cfg,
                                        Path(tmp), os.environ.get(RAW_LOG_ENV))
            except Exception as exc:  # noqa: BLE001 - one TP failing must not lose the others' measurements
                if len(tps) == 1 and isinstance(exc, torch.OutOfMemoryError):
                    raise UserError(f"model {model.name} at TP {tp}: out of {device} memory "
                                    f"({str(exc).splitlines()[0]}); use a larger TP or smaller grids",
                                    key="model") from None
                if len(tps) == 1:
                    raise
                failed.append(f"tp {tp}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                err.print(f"torch backend: TP {tp} failed ({failed[-1]}); continuing")
                continue
            finally:
                progress.update(task, completed=done + per_tp)
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
            if raw:
                raw("sweep", {"model": model.name, **result.to_json()})
            results.append(result)
    return build_profile(model, hw, req, results, software_info(torch, device, req), missing, failed, max(batch_grid))


def build_profile(model: ModelSpec, hw: HardwareSpec, req: SweepRequest, results: list[Any],
                  software: dict[str, str], missing_tps: list[int], failed: list[str], max_batch: int) -> Profile:
    """Assemble measured per-TP results (RankResult) into a Profile; provenance says what was left out."""
    notes = [METHOD, "LM head " + ("included (prefill: last token's logits; decode: every sequence's)"
                                   if req.include_lm_head else "left out (profiles/measurements shapes)")]
    sweeps = []
    for r in results:
        notes.append(f"tp {r.tp}: {r.weight_bytes_per_gpu / 1e9:.2f} GB weights per GPU, KV capacity "
                     f"{r.kv_capacity_tokens} tokens, {r.wall_s:.0f} s, CUDA-graph capture {r.capture_s:.1f} s")
        notes += [f"tp {r.tp}: skipped {s}" for s in r.skipped]
        if not r.prefill or not r.decode:
            notes.append(f"tp {r.tp}: dropped (no {'prefill' if not r.prefill else 'decode'} point fits)")
            continue
        sweeps.append(RawSweep(tp=r.tp, gpus=r.tp, prefill=r.prefill, decode=r.decode,
                               kv_capacity_tokens=r.kv_capacity_tokens, max_batch=max_batch))
    if missing_tps:
        notes.append(f"not run: tp {', '.join(map(str, missing_tps))} (more GPUs than the machine has)")
    notes += [f"failed: {f}" for f in failed]
    if not sweeps:
        raise UserError(f"model {model.name}: no TP size produced both prefill and decode points; "
                        + "; ".join(notes[2:]), key="model")
    return assemble(model, hw, req, sweeps, backend="torch", software=software, notes="; ".join(notes))
