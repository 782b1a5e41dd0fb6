"""Tensor parallel > 1: one process per GPU (NCCL) or per CPU rank (gloo), torchrun-style.

The parent starts ``python -m planner.profiler.torch_worker PAYLOAD RANK`` once per rank (plain
subprocesses: unlike multiprocessing's spawn they never re-import the caller's main module). Rank 0
writes the measured sweep as JSON to a file the parent reads back. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends): on shared hosts it can take the
GPUs out of service, and the all-reduces measured here do not need it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from planner.perf.model import ModelSpec
from planner.profiler.torch_measure import MeasureConfig, RankResult, measure_rank

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class DistComm:
    def __init__(self, rank: int, world: int, device: torch.device, backend: str) -> None:
        self.rank, self.world, self.device, self.backend = rank, world, device, backend

    def all_reduce(self, t: torch.Tensor) -> None:
        dist.all_reduce(t)

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty((self.world * t.shape[0], *t.shape[1:]), device=t.device, dtype=t.dtype)
        dist.all_gather_into_tensor(out, t.contiguous())
        return out

    def _reduce_scalar(self, x: float, op: Any, dtype: torch.dtype) -> float:
        t = torch.tensor([x], device=self.device, dtype=dtype)
        dist.all_reduce(t, op=op)
        return float(t.item())

    def max_float(self, x: float) -> float:
        return self._reduce_scalar(x, dist.ReduceOp.MAX, torch.float64)

    def min_int(self, x: int) -> int:
        return int(self._reduce_scalar(x, dist.ReduceOp.MIN, torch.int64))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, payload: dict[str, Any], result_path: str) -> None:
    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    cfg = MeasureConfig(**payload["cfg"])
    if cfg.is_cuda:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        backend = "gloo"
    cfg = MeasureConfig(**{**payload["cfg"], "device": str(device)})
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        comm = DistComm(rank, world, device, backend)
        # An eager collective first: NCCL communicators must exist before a CUDA graph captures one.
        warm = torch.ones(1, device=device)
        dist.all_reduce(warm)
        log = payload.get("raw_log") if rank == 0 else None
        on_point = _raw_logger(log) if log else None
        result = measure_rank(ModelSpec(**payload["model"]), world, payload["isl"], payload["batch"],
                              payload["ctx"], cfg, comm, on_point)
        if rank == 0:
            Path(result_path).write_text(json.dumps(result.to_json()))
    finally:
        dist.destroy_process_group()


def _raw_logger(path: str) -> Any:
    def on_point(kind: str, data: dict[str, Any]) -> None:
        with open(path, "a") as f:
            f.write(json.dumps({"kind": kind, **data}) + "\n")

    return on_point


def measure_tp(model: ModelSpec, tp: int, isl: list[int], batch: list[int], ctx: list[int], cfg: MeasureConfig,
               workdir: Path, raw_log: str | None = None, timeout_s: float | None = None) -> RankResult:
    """Start ``tp`` ranks, wait for all, return rank 0's result (slowest-rank medians)."""
    result_path = workdir / f"tp{tp}.json"
    payload_path = workdir / f"tp{tp}-payload.json"
    payload = {"model": asdict(model), "cfg": asdict(cfg), "isl": isl, "batch": batch, "ctx": ctx,
               "raw_log": raw_log, "port": free_port(), "world": tp, "result": str(result_path)}
    payload_path.write_text(json.dumps(payload))
    env = {**os.environ, **SAFE_ENV}
    procs = []
    logs = []
    for rank in range(tp):
        log = open(workdir / f"tp{tp}-rank{rank}.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "planner.profiler.torch_worker", str(payload_path),
                                       str(rank)], env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or (deadline is not None and time.monotonic() > deadline):
                break
            time.sleep(0.2)
    finally:
        for p in procs:  # a rank that died leaves the others blocked in a collective: stop them
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    codes = [p.returncode for p in procs]
    if any(codes) or not result_path.exists():
        rank = next((i for i, c in enumerate(codes) if c), 0)
        tail = (workdir / f"tp{tp}-rank{rank}.log").read_text().strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"tp {tp} rank {rank} exited with {codes[rank]}: {tail[0]}")
    return RankResult.from_json(json.loads(result_path.read_text()))


def main(argv: list[str]) -> None:
    payload = json.loads(Path(argv[0]).read_text())
    _worker(int(argv[1]), int(payload["world"]), int(payload["port"]), payload, str(payload["result"]))


if __name__ == "__main__":
    main(sys.argv[1:])
