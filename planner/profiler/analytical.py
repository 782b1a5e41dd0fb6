"""Analytical backend: every point from the roofline model in planner.perf.roofline (under 1 s a sweep)."""

from __future__ import annotations

from dataclasses import asdict

from planner.perf import roofline
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profile import Profile
from planner.profiler.assemble import RawSweep, assemble
from planner.profiler.grids import SweepRequest


def sweep_tp(model: ModelSpec, hw: HardwareSpec, tp: int, isl_grid: tuple[int, ...], batch_grid: tuple[int, ...],
             ctx_grid: tuple[int, ...], eff: roofline.Efficiency = roofline.CALIBRATED) -> RawSweep:
    prefill = [(isl, roofline.prefill_ms(model, hw, tp, isl, eff)) for isl in isl_grid]
    decode = [(b, c, roofline.decode_step_ms(model, hw, tp, b, c, eff)) for c in ctx_grid for b in batch_grid]
    return RawSweep(tp=tp, gpus=tp, prefill=prefill, decode=decode,
                    kv_capacity_tokens=roofline.kv_capacity_tokens(model, hw, tp, eff), max_batch=max(batch_grid))


def profile_analytical(model: ModelSpec, hw: HardwareSpec, req: SweepRequest,
                       eff: roofline.Efficiency = roofline.CALIBRATED) -> Profile:
    isl_grid, batch_grid, ctx_grid = req.grids(model.max_context_tokens)
    sweeps = [sweep_tp(model, hw, tp, isl_grid, batch_grid, ctx_grid, eff) for tp in req.tp]
    calibration = {k: float(v) for k, v in asdict(eff).items()}
    return assemble(model, hw, req, sweeps, backend="analytical", calibration=calibration,
                    notes="roofline model calibrated on H200 measurements (profiles/measurements/h200/qwen3-8b.json)")
