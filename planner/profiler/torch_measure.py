"""Measure one tensor-parallel rank's prefill and decode times (needs torch).

Method (the same on every device; only the clock differs):

* prefill: one request of ``isl`` tokens, eager, timed with CUDA events (``perf_counter`` on the CPU);
* decode: one step for ``batch`` sequences of ``context`` tokens of KV, captured in a CUDA graph and timed
  by replaying it (eager on the CPU, which has no graphs);
* each point: warm-up runs, then the median of timed runs. Big points get fewer runs so that one point
  costs about ``point_budget_s`` (a 32k-token prefill of a 32B model takes seconds): one warm-up and
  ``min_iters`` timed runs at least. With several ranks every count is agreed across ranks (collectives
  must match) and a point's time is the slowest rank's median.
* KV capacity: free device memory after the weights are loaded, as an engine sizes its cache:
  ``total x utilisation - used - reserve`` over KV bytes per token per GPU (planner.perf.roofline's
  definition, with the real memory in place of the datasheet's). Decode points whose KV exceeds it are
  skipped - an engine could not hold them - and listed; so are prefills whose activations cannot fit.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import torch

from planner.perf.model import ModelSpec
from planner.profiler.torch_decoder import ShardedDecoder, ShardShape, rope_tables


@dataclass(frozen=True)
class MeasureConfig:
    device: str = "cuda"  # "cpu" or "cuda[:N]"
    warmup: int = 3
    iters: int = 20
    min_iters: int = 3
    point_budget_s: float = 2.0
    include_lm_head: bool = True
    memory_utilization: float = 0.90
    reserve_bytes: float = 2.0e9
    memory_bytes_hint: float = 0.0  # CPU only: the memory to size the KV capacity from (the GPU's)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def dtype(self) -> torch.dtype:
        # bf16 as served; the CPU runs fp32 (bf16 CPU kernels are slow and the CPU path checks logic only).
        return torch.bfloat16 if self.is_cuda else torch.float32


class Comm(Protocol):
    rank: int
    world: int

    def all_reduce(self, t: torch.Tensor) -> None: ...
    def all_gather(self, t: torch.Tensor) -> torch.Tensor: ...
    def max_float(self, x: float) -> float: ...
    def min_int(self, x: int) -> int: ...


class LocalComm:
    rank = 0
    world = 1

    def all_reduce(self, t: torch.Tensor) -> None:
        return None

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def max_float(self, x: float) -> float:
        return x

    def min_int(self, x: int) -> int:
        return x


@dataclass
class RankResult:
    tp: int
    prefill: list[tuple[int, float]] = field(default_factory=list)  # (isl, ttft_ms)
    decode: list[tuple[int, int, float]] = field(default_factory=list)  # (batch, context, itl_ms)
    kv_capacity_tokens: int = 0
    weight_bytes_per_gpu: int = 0
    skipped: list[str] = field(default_factory=list)
    capture_s: float = 0.0  # total CUDA-graph capture time (decode)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"tp": self.tp, "prefill": self.prefill, "decode": self.decode,
                "kv_capacity_tokens": self.kv_capacity_tokens, "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
                "skipped": self.skipped, "capture_s": self.capture_s, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RankResult:
        return cls(tp=int(d["tp"]), prefill=[(int(a), float(b)) for a, b in d["prefill"]],
                   decode=[(int(a), int(b), float(c)) for a, b, c in d["decode"]],
                   kv_capacity_tokens=int(d["kv_capacity_tokens"]), weight_bytes_per_gpu=int(d["weight_bytes_per_gpu"]),
                   skipped=list(d["skipped"]), capture_s=float(d["capture_s"]), wall_s=float(d["wall_s"]))


OnPoint = Callable[[str, dict[str, Any]], None]


class _Clock:
    def __init__(self, cfg: MeasureConfig, device: torch.device) -> None:
        self.cuda = cfg.is_cuda
        self.device = device

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def time_ms(self, fn: Callable[[], Any]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def median_ms(fn: Callable[[], Any], cfg: MeasureConfig, clock: _Clock, comm: Comm) -> float:
    """Warm up, then the median of timed runs; counts shrink for slow points and agree across ranks."""
    clock.sync()
    first = comm.max_float(clock.time_ms(fn))  # the first warm-up run also sizes the point
    budget_ms = cfg.point_budget_s * 1e3
    extra_warmup = max(0, cfg.warmup - 1) if first * cfg.warmup <= budget_ms else 0
    for _ in range(extra_warmup):
        fn()
    clock.sync()
    n = int(min(cfg.iters, max(cfg.min_iters, budget_ms // max(first, 1e-3))))
    times = [clock.time_ms(fn) for _ in range(n)]
    return comm.max_float(statistics.median(times))


def kv_capacity_tokens(model: ModelSpec, tp: int, dec: ShardedDecoder, cfg: MeasureConfig, device: torch.device,
                       comm: Comm) -> int:
    # The cache holds the run's dtype: bf16 on GPUs (the model's 2 bytes), fp32 on the CPU.
    per_token = model.kv_bytes_per_token_per_gpu(tp) / model.kv_dtype_bytes * (torch.finfo(cfg.dtype).bits // 8)
    if cfg.is_cuda:
        free, total = torch.cuda.mem_get_info(device)
        budget = total * cfg.memory_utilization - (total - free) - cfg.reserve_bytes
    else:
        budget = cfg.memory_bytes_hint * cfg.memory_utilization - dec.weight_bytes() - cfg.reserve_bytes
    return comm.min_int(max(0, int(budget / per_token)))


def _prefill_fits(dec: ShardedDecoder, isl: int, cfg: MeasureConfig, device: torch.device, comm: Comm) -> bool:
    if not cfg.is_cuda:
        return True
    free, _total = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    need = dec.shape.prefill_activation_bytes(isl, torch.finfo(cfg.dtype).bits // 8)
    return comm.min_int(int(need < free)) == 1


def _compact(points: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{b}x{c}" for b, c in points)


def measure_rank(model: ModelSpec, tp: int, isl_grid: Sequence[int], batch_grid: Sequence[int],
                 ctx_grid: Sequence[int], cfg: MeasureConfig, comm: Comm | None = None,
                 on_point: OnPoint | None = None) -> RankResult:
    """Build this rank's shard, then measure every prefill and decode point that fits."""
    comm = comm or LocalComm()
    t_start = time.perf_counter()
    device = torch.device(cfg.device)
    if cfg.is_cuda:
        torch.cuda.set_device(device)
    shape = ShardShape.of(model, tp, cfg.include_lm_head)
    world_comm = comm if comm.world > 1 else None
    dec = ShardedDecoder(shape, device, cfg.dtype, all_reduce=world_comm.all_reduce if world_comm else None,
                         all_gather=world_comm.all_gather if world_comm else None, seed=1234 + comm.rank)
    out = RankResult(tp=tp, weight_bytes_per_gpu=dec.weight_bytes())
    out.kv_capacity_tokens = kv_capacity_tokens(model, tp, dec, cfg, device, comm)
    max_pos = max([*isl_grid, *ctx_grid, 1])
    cos, sin = rope_tables(max_pos, shape.head_dim, device, cfg.dtype)
    clock = _Clock(cfg, device)
    emit: OnPoint = on_point or (lambda kind, data: None)

    with torch.inference_mode():
        for isl in sorted(isl_grid):
            if not _prefill_fits(dec, isl, cfg, device, comm):
                out.skipped.append(f"prefill isl {isl}: activations do not fit")
                emit("skip", {"stage": "prefill", "isl": isl})
                continue
            ms = median_ms(partial(dec.prefill, dec.random_tokens(isl), cos, sin), cfg, clock, comm)
            out.prefill.append((isl, ms))
            emit("prefill", {"tp": tp, "isl": isl, "ms": ms})
        if cfg.is_cuda:
            torch.cuda.empty_cache()

        over: list[tuple[int, int]] = []
        for ctx in sorted(ctx_grid):
            fit = sorted(b for b in batch_grid if b * ctx <= out.kv_capacity_tokens)
            too_big = [(b, ctx) for b in sorted(batch_grid) if b * ctx > out.kv_capacity_tokens]
            over += too_big
            for b, c in too_big:
                emit("skip", {"stage": "decode", "batch": b, "ctx": c})
            if not fit:
                continue
            k_cache, v_cache = dec.new_kv_cache(max(fit), ctx)
            cos_p, sin_p = cos[ctx - 1].view(1, 1, -1), sin[ctx - 1].view(1, 1, -1)
            for b in fit:
                step = partial(dec.decode, dec.random_tokens(b), k_cache, v_cache, cos_p, sin_p)
                run, capture_s = _graphed(step, cfg, device)
                out.capture_s += capture_s
                ms = median_ms(run, cfg, clock, comm)
                out.decode.append((b, ctx, ms))
                emit("decode", {"tp": tp, "batch": b, "ctx": ctx, "ms": ms, "capture_s": capture_s})
                del run, step  # the graph and the step hold the cache: drop both before the next context
            del k_cache, v_cache
            if cfg.is_cuda:
                torch.cuda.empty_cache()
        if over:
            out.skipped.append(f"decode batch x context over the KV capacity of {out.kv_capacity_tokens} tokens: "
                               f"{_compact(over)}")
    out.wall_s = time.perf_counter() - t_start
    return out


def _graphed(step: Callable[[], Any], cfg: MeasureConfig, device: torch.device) -> tuple[Callable[[], Any], float]:
    """On CUDA: warm up on a side stream, capture one step in a graph, return its replay. CPU: eager."""
    if not cfg.is_cuda:
        return step, 0.0
    t0 = time.perf_counter()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize(device)
    return graph.replay, time.perf_counter() - t0
