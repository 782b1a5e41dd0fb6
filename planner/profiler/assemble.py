"""Turn raw per-TP measurements from any backend into a validated Profile with selection and advice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from planner import __version__
from planner.perf.hardware import HardwareSpec
from planner.perf.kv import LINKS_BYTES_PER_S, advise, gbps_to_bytes_per_s
from planner.perf.model import ModelSpec
from planner.perf.selection import StageChoice, select_decode, select_prefill
from planner.profile import (
    SCHEMA,
    DecodePoint,
    DecodeSweep,
    DisaggregationAdvice,
    HardwareInfo,
    ModelInfo,
    PrefillPoint,
    PrefillSweep,
    Profile,
    Provenance,
    Selection,
    StageSelection,
    Workload,
)
from planner.profiler.grids import SweepRequest


@dataclass(frozen=True)
class RawSweep:
    """What a backend measured at one TP size."""

    tp: int
    gpus: int
    prefill: Sequence[tuple[int, float]]  # (isl, ttft_ms)
    decode: Sequence[tuple[int, int, float]]  # (batch, context_tokens, itl_ms)
    kv_capacity_tokens: int
    max_batch: int


def model_info(model: ModelSpec) -> ModelInfo:
    return ModelInfo(
        name=model.name, kv_bytes_per_token=model.kv_bytes_per_token, params=model.params,
        weight_bytes=model.weight_bytes, layers=model.layers, hidden=model.hidden, heads=model.heads,
        kv_heads=model.kv_heads, head_dim=model.head_dim, intermediate=model.intermediate, vocab=model.vocab,
        dtype_bytes=model.dtype_bytes, max_context_tokens=model.max_context_tokens, experts=model.experts,
        experts_per_token=model.experts_per_token,
    )


def hardware_info(hw: HardwareSpec) -> HardwareInfo:
    return HardwareInfo(gpu=hw.name, memory_bytes=hw.memory_bytes, hbm_bytes_per_s=hw.hbm_bytes_per_s,
                        bf16_flops=hw.bf16_flops, link_bytes_per_s=hw.link_bytes_per_s, nic_gbps=hw.nic_gbps,
                        source=hw.source)


def _stage(choice: StageChoice) -> StageSelection:
    return StageSelection(tp=choice.tp, gpus=choice.gpus, meets_sla=choice.meets_sla,
                          tokens_per_s_per_gpu=round(choice.tokens_per_s_per_gpu, 3),
                          latency_ms=round(choice.latency_ms, 4) if choice.latency_ms != float("inf") else -1.0,
                          target_ms=choice.target_ms, batch=choice.batch, context_tokens=choice.context_tokens,
                          reason=choice.reason)


def link_bytes_per_s(req: SweepRequest, hw: HardwareSpec) -> float:
    if req.kv_link_gbps is not None:
        return gbps_to_bytes_per_s(req.kv_link_gbps)
    return gbps_to_bytes_per_s(hw.nic_gbps)


def assemble(model: ModelSpec, hw: HardwareSpec, req: SweepRequest, sweeps: Sequence[RawSweep],
             backend: str, software: Mapping[str, str] | None = None, calibration: Mapping[str, float] | None = None,
             notes: str = "", now: datetime | None = None) -> Profile:
    created = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    prefill = [PrefillSweep(tp=s.tp, gpus=s.gpus, points=[
        PrefillPoint(isl=isl, ttft_ms=round(ms, 4), tokens_per_s_per_gpu=round(isl / (ms / 1e3) / s.gpus, 3))
        for isl, ms in s.prefill]) for s in sweeps]
    decode = [DecodeSweep(tp=s.tp, gpus=s.gpus, kv_capacity_tokens=s.kv_capacity_tokens, max_batch=s.max_batch,
                          points=[DecodePoint(batch=b, context_tokens=c, itl_ms=round(ms, 4),
                                              tokens_per_s_per_gpu=round(b / (ms / 1e3) / s.gpus, 3))
                                  for b, c, ms in s.decode]) for s in sweeps]
    profile = Profile(
        schema_=SCHEMA,
        model=model_info(model), hardware=hardware_info(hw),
        provenance=Provenance(backend=backend, created_at=created, planner_version=__version__,  # type: ignore[arg-type]
                              software=dict(software or {}), calibration=dict(calibration or {}), notes=notes),
        prefill=prefill, decode=decode,
    )
    return with_selection(profile, req, hw)


def with_selection(profile: Profile, req: SweepRequest, hw: HardwareSpec) -> Profile:
    pre = select_prefill({s.tp: profile.prefill_curve(s.tp) for s in profile.prefill}, req.isl, req.ttft_ms)
    dec = select_decode({s.tp: profile.decode_curve(s.tp) for s in profile.decode}, req.isl, req.osl, req.itl_ms)
    link = link_bytes_per_s(req, hw)
    adv = advise(req.isl, profile.model.kv_bytes_per_token, link, pre.latency_ms, req.ttft_ms, req.itl_ms)
    selection = Selection(
        workload=Workload(isl=req.isl, osl=req.osl, ttft_ms=req.ttft_ms, itl_ms=req.itl_ms,
                          kv_link_gbps=req.kv_link_gbps if req.kv_link_gbps is not None else hw.nic_gbps),
        prefill=_stage(pre), decode=_stage(dec),
        disaggregation=DisaggregationAdvice(mode=adv.mode, kv_bytes=adv.kv_bytes, link_bytes_per_s=link,  # type: ignore[arg-type]
                                            transfer_ms=round(adv.transfer_ms, 4), reason=adv.reason),
    )
    return profile.model_copy(update={"selection": selection})


__all__ = ["RawSweep", "assemble", "with_selection", "LINKS_BYTES_PER_S"]
