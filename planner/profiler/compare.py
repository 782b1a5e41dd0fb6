"""How far the analytical model is from a measured profile (torch backend): error per TP and stage.

The profile carries the model's shapes and the GPU's datasheet figures, so the analytical model is
evaluated on exactly the measured points. Errors are ``modelled / measured - 1``; the table reports the
median and worst absolute error and the median signed error (bias: > 0 means the model is too slow).
Prefill points at or under ``accuracy.PREFILL_MIN_MS`` are launch-bound noise and are left out of the
prefill rows (as ``planner bench profile`` does), and counted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from planner.perf import roofline
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profile import Profile
from planner.profiler.accuracy import PREFILL_MIN_MS


@dataclass(frozen=True)
class StageError:
    model: str
    tp: int
    stage: str  # "prefill" | "decode" | "kv_capacity"
    points: int
    excluded: int  # prefill points under PREFILL_MIN_MS
    median_abs: float
    worst_abs: float
    median_signed: float
    worst_point: str


@dataclass(frozen=True)
class ProfileComparison:
    rows: tuple[StageError, ...]

    def row(self, stage: str, tp: int = 1) -> StageError:
        return next(r for r in self.rows if r.stage == stage and r.tp == tp)

    def markdown(self) -> str:
        head = ("| model | TP | stage | points | median abs error | worst abs error | median signed | worst at |\n"
                "| --- | --- | --- | --- | --- | --- | --- | --- |")
        lines = [head]
        for r in self.rows:
            n = f"{r.points}" + (f" (+{r.excluded} under {PREFILL_MIN_MS:g} ms)" if r.excluded else "")
            lines.append(f"| {r.model} | {r.tp} | {r.stage} | {n} | {r.median_abs:.1%} | {r.worst_abs:.1%} | "
                         f"{r.median_signed:+.1%} | {r.worst_point} |")
        return "\n".join(lines)


def spec_of(profile: Profile) -> tuple[ModelSpec, HardwareSpec]:
    """The ModelSpec and HardwareSpec a profile was made for (everything the roofline reads)."""
    m, h = profile.model, profile.hardware
    spec = ModelSpec(name=m.name, layers=m.layers, hidden=m.hidden, heads=m.heads, kv_heads=m.kv_heads,
                     head_dim=m.head_dim, intermediate=m.intermediate, vocab=m.vocab, dtype_bytes=m.dtype_bytes,
                     kv_dtype_bytes=m.dtype_bytes, max_context_tokens=m.max_context_tokens)
    hw = HardwareSpec(name=h.gpu, memory_bytes=h.memory_bytes, hbm_bytes_per_s=h.hbm_bytes_per_s,
                      bf16_flops=h.bf16_flops, fp8_flops=None, link_bytes_per_s=h.link_bytes_per_s,
                      nic_gbps=h.nic_gbps, source=h.source)
    return spec, hw


def _row(model: str, tp: int, stage: str, pairs: list[tuple[str, float, float]], excluded: int = 0) -> StageError:
    errs = [(label, modelled / measured - 1.0) for label, measured, modelled in pairs]
    worst = max(errs, key=lambda e: abs(e[1]))
    return StageError(model=model, tp=tp, stage=stage, points=len(errs), excluded=excluded,
                      median_abs=statistics.median(abs(e) for _, e in errs), worst_abs=abs(worst[1]),
                      median_signed=statistics.median(e for _, e in errs), worst_point=f"{worst[0]} ({worst[1]:+.1%})")


def compare_profiles(measured: Profile, model_eff: roofline.Efficiency = roofline.CALIBRATED) -> ProfileComparison:
    """Error of the analytical model (efficiencies ``model_eff``) on every point of a measured profile."""
    spec, hw = spec_of(measured)
    rows: list[StageError] = []
    for sweep in measured.prefill:
        pairs = [(f"isl {p.isl}", p.ttft_ms, roofline.prefill_ms(spec, hw, sweep.tp, p.isl, model_eff))
                 for p in sweep.points]
        kept = [p for p in pairs if p[1] > PREFILL_MIN_MS]
        if kept:
            rows.append(_row(spec.name, sweep.tp, "prefill", kept, len(pairs) - len(kept)))
    for dsweep in measured.decode:
        pairs = [(f"b{p.batch} ctx{p.context_tokens}", p.itl_ms,
                  roofline.decode_step_ms(spec, hw, dsweep.tp, p.batch, p.context_tokens, model_eff))
                 for p in dsweep.points]
        rows.append(_row(spec.name, dsweep.tp, "decode", pairs))
        if dsweep.kv_capacity_tokens:
            cap = float(roofline.kv_capacity_tokens(spec, hw, dsweep.tp, model_eff))
            if cap > 0:
                rows.append(_row(spec.name, dsweep.tp, "kv_capacity",
                                 [("tokens", float(dsweep.kv_capacity_tokens), cap)]))
    return ProfileComparison(tuple(rows))


def to_measurement_format(profile: Profile, model: ModelSpec, tp: int = 1) -> dict:
    """One TP of a profile in profiles/measurements' format (scored by planner.profiler.accuracy)."""
    pre = next(s for s in profile.prefill if s.tp == tp)
    dec = next(s for s in profile.decode if s.tp == tp)
    return {"model": model.name, "config": {"layers": model.layers, "hidden": model.hidden, "heads": model.heads,
                                            "kv_heads": model.kv_heads, "head_dim": model.head_dim,
                                            "inter": model.intermediate},
            "gpu": profile.provenance.software.get("gpu", profile.hardware.gpu),
            "torch": profile.provenance.software.get("torch", ""), "tp": tp,
            "prefill": [{"isl": p.isl, "ms": p.ttft_ms} for p in pre.points],
            "decode": [{"batch": p.batch, "ctx": p.context_tokens, "ms": p.itl_ms} for p in dec.points]}
