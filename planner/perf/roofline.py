"""Analytical ("rapid") step-time model: a roofline per tensor-parallel size.

Per step and per GPU (TP ranks split heads and MLP columns, so FLOPs and weight bytes divide by ``tp``):

* GEMMs: ``2 x active params x tokens`` FLOPs against reading the weights once; the two rooflines are
  joined by a smooth maximum, because real kernels neither overlap perfectly nor serialise.
* attention: causal ``QK^T`` and ``PV`` FLOPs (prefill) or KV-cache reads (decode), same treatment.
* tensor parallel: two all-reduces per layer of ``tokens x hidden`` activations, ring algorithm over the
  intra-node link, ``2 (tp-1)/tp`` of the message per GPU, plus a fixed latency per all-reduce.
* fixed costs: the host must launch every kernel. Prefill runs eagerly, so the host's launch time and the
  GPU's work overlap (again a smooth maximum); decode replays a CUDA graph, leaving a small per-layer
  cost. Worked example (Qwen3-8B shape, H200, TP1): batch 1 decode reads ~13.9 GB of weights, which at
  4.8 TB/s x 0.91 efficiency is 3.2 ms, plus 36 layers x 72 us of graph replay and 0.3 ms per step
  = 6.1 ms against 5.75 ms measured.

The efficiency factors are properties of the hardware class and the software stack, not of one model;
``CALIBRATED`` holds the values fitted on the real H200 measurements (profiles/measurements), and
``planner bench profile`` reports how well they generalise.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec


@dataclass(frozen=True)
class Efficiency:
    hbm: float = 0.91  # achieved / peak HBM bandwidth for streaming weights and KV
    gemm: float = 0.53  # achieved / peak dense tensor FLOP/s for large GEMMs
    attention: float = 0.53  # achieved / peak FLOP/s for flash attention
    link: float = 0.75  # achieved / peak NVLink bandwidth in ring all-reduce
    smooth_p: float = 2.1  # exponent of the smooth maximum joining two rooflines
    prefill_launch_us_per_layer: float = 389.0  # eager-mode host launch time per layer
    decode_us_per_layer: float = 72.0  # CUDA-graph replay and small-kernel tails per layer
    step_overhead_us: float = 300.0  # per step: sampling, synchronisation
    allreduce_latency_us: float = 10.0  # per all-reduce, per ring hop group
    memory_utilization: float = 0.90  # fraction of HBM the engine may use
    reserve_bytes: float = 2.0e9  # activations, CUDA graphs, allocator slack per GPU


# Fitted by planner.profiler.calibrate on profiles/measurements/h200/qwen3-8b.json (least squares on log
# error, step overhead bounded at 300 us to keep per-layer costs per layer). The errors that leaves are
# README's, "The analytical ("rapid") model" (`planner bench profile`).
CALIBRATED = Efficiency()


def smooth_max(a: float, b: float, p: float) -> float:
    if a <= 0:
        return b
    if b <= 0:
        return a
    return float((a**p + b**p) ** (1.0 / p))


def _allreduce_s(model: ModelSpec, hw: HardwareSpec, tp: int, tokens: float, eff: Efficiency) -> float:
    if tp <= 1:
        return 0.0
    msg_bytes = tokens * model.hidden * model.dtype_bytes
    per_gpu_bytes = 2.0 * (tp - 1) / tp * msg_bytes
    one = per_gpu_bytes / (hw.link_bytes_per_s * eff.link) + eff.allreduce_latency_us * 1e-6 * (1 + (tp - 1) / 4)
    return 2 * model.layers * one


def _lm_head_params(model: ModelSpec) -> int:
    return model.vocab * model.hidden


def prefill_ms(model: ModelSpec, hw: HardwareSpec, tp: int, isl: float, eff: Efficiency = CALIBRATED) -> float:
    """Time to run one prompt of ``isl`` tokens through the model (no queueing), in milliseconds."""
    flops_peak = hw.flops(model.dtype_bytes)
    weights = (model.layer_params + _lm_head_params(model)) * model.dtype_bytes / tp
    gemm_flops = 2.0 * (model.active_layer_params * isl + _lm_head_params(model)) / tp
    t_linear = smooth_max(weights / (hw.hbm_bytes_per_s * eff.hbm), gemm_flops / (flops_peak * eff.gemm),
                          eff.smooth_p)
    attn_flops = 4.0 * (isl * isl / 2.0) * model.heads * model.head_dim * model.layers / tp
    t_attn = attn_flops / (flops_peak * eff.attention)
    t_gpu = t_linear + t_attn + _allreduce_s(model, hw, tp, isl, eff)
    t_host = model.layers * eff.prefill_launch_us_per_layer * 1e-6
    return 1e3 * (smooth_max(t_gpu, t_host, eff.smooth_p) + eff.step_overhead_us * 1e-6)


def decode_step_ms(model: ModelSpec, hw: HardwareSpec, tp: int, batch: float, context_tokens: float,
                   eff: Efficiency = CALIBRATED) -> float:
    """One decode step for ``batch`` sequences each holding ``context_tokens`` of KV: the ITL, in ms."""
    flops_peak = hw.flops(model.dtype_bytes)
    weights = (model.layer_params + _lm_head_params(model)) * model.dtype_bytes / tp
    if model.is_moe:
        # Each token reads only its experts; a batch touches at most all of them.
        touched = min(model.experts, batch * model.experts_per_token) / max(model.experts, 1)
        expert_bytes = model.moe_layers * 3 * model.hidden * model.experts * model.expert_intermediate
        weights -= expert_bytes * (1.0 - touched) * model.dtype_bytes / tp
    gemm_flops = 2.0 * (model.active_layer_params + _lm_head_params(model)) * batch / tp
    t_linear = smooth_max(weights / (hw.hbm_bytes_per_s * eff.hbm), gemm_flops / (flops_peak * eff.gemm),
                          eff.smooth_p)
    kv_bytes = batch * context_tokens * model.kv_bytes_per_token_per_gpu(tp)
    attn_flops = 4.0 * batch * context_tokens * model.heads * model.head_dim * model.layers / tp
    t_attn = smooth_max(kv_bytes / (hw.hbm_bytes_per_s * eff.hbm), attn_flops / (flops_peak * eff.attention),
                        eff.smooth_p)
    t_fixed = model.layers * eff.decode_us_per_layer * 1e-6 + eff.step_overhead_us * 1e-6
    return 1e3 * (t_linear + t_attn + _allreduce_s(model, hw, tp, batch, eff) + t_fixed)


def kv_capacity_tokens(model: ModelSpec, hw: HardwareSpec, tp: int, eff: Efficiency = CALIBRATED) -> int:
    """KV tokens one replica of ``tp`` GPUs holds: memory x utilisation - weights/TP - reserve, per GPU."""
    free_per_gpu = hw.memory_bytes * eff.memory_utilization - model.weight_bytes / tp - eff.reserve_bytes
    if free_per_gpu <= 0:
        return 0
    return int(free_per_gpu / model.kv_bytes_per_token_per_gpu(tp))
