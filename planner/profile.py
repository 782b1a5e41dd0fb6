"""The profile format (contract ``planner.profile/v1``): pydantic schema, load/save, curves."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from planner.errors import UserError, not_utf8
from planner.perf.curves import DecodeCurve, PrefillCurve
from planner.types import Mode

SCHEMA = "planner.profile/v1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrefillPoint(_Strict):
    isl: PositiveInt
    ttft_ms: PositiveFloat
    tokens_per_s_per_gpu: PositiveFloat


class PrefillSweep(_Strict):
    tp: PositiveInt
    gpus: PositiveInt
    points: list[PrefillPoint] = Field(min_length=1)


class DecodePoint(_Strict):
    batch: PositiveInt
    context_tokens: PositiveInt
    itl_ms: PositiveFloat
    tokens_per_s_per_gpu: PositiveFloat


class DecodeSweep(_Strict):
    tp: PositiveInt
    gpus: PositiveInt
    kv_capacity_tokens: int = Field(ge=0)
    max_batch: PositiveInt
    points: list[DecodePoint] = Field(min_length=1)


class ModelInfo(_Strict):
    name: str
    kv_bytes_per_token: PositiveInt
    params: PositiveInt
    weight_bytes: PositiveInt
    layers: PositiveInt
    hidden: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt
    intermediate: PositiveInt
    vocab: int = Field(ge=0)
    dtype_bytes: PositiveInt = 2
    max_context_tokens: PositiveInt = 32768
    experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)


class HardwareInfo(_Strict):
    gpu: str
    memory_bytes: PositiveFloat
    hbm_bytes_per_s: PositiveFloat
    bf16_flops: PositiveFloat
    link_bytes_per_s: PositiveFloat
    nic_gbps: PositiveFloat
    source: str = ""


class Provenance(_Strict):
    backend: Literal["analytical", "endpoint", "torch", "kubernetes", "measured"]
    created_at: str
    planner_version: str
    software: dict[str, str] = Field(default_factory=dict)
    calibration: dict[str, float] = Field(default_factory=dict)
    notes: str = ""


class Workload(_Strict):
    isl: PositiveInt
    osl: PositiveInt
    ttft_ms: PositiveFloat
    itl_ms: PositiveFloat
    kv_link_gbps: PositiveFloat | None = None


class StageSelection(_Strict):
    tp: PositiveInt
    gpus: PositiveInt
    meets_sla: bool
    tokens_per_s_per_gpu: float
    latency_ms: float  # TTFT for prefill, ITL for decode, at the workload
    target_ms: float
    batch: int | None = None  # decode: the largest batch meeting ITL that fits the KV cache
    context_tokens: int | None = None
    reason: str


class DisaggregationAdvice(_Strict):
    mode: Mode
    kv_bytes: float
    link_bytes_per_s: float
    transfer_ms: float
    reason: str


class Selection(_Strict):
    workload: Workload
    prefill: StageSelection
    decode: StageSelection
    disaggregation: DisaggregationAdvice | None = None


class Profile(_Strict):
    schema_: Literal["planner.profile/v1"] = Field("planner.profile/v1", alias="schema")
    model: ModelInfo
    hardware: HardwareInfo
    provenance: Provenance
    prefill: list[PrefillSweep] = Field(min_length=1)
    decode: list[DecodeSweep] = Field(min_length=1)
    selection: Selection | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _unique_tp(self) -> Profile:
        for stage, sweeps in (("prefill", self.prefill), ("decode", self.decode)):
            tps = [s.tp for s in sweeps]
            if len(set(tps)) != len(tps):
                raise ValueError(f"{stage}: duplicate tp entries {tps}")
        return self

    # --- curves -------------------------------------------------------------------------------------
    def prefill_curve(self, tp: int) -> PrefillCurve:
        sweep = next((s for s in self.prefill if s.tp == tp), None)
        if sweep is None:
            raise KeyError(f"profile has no prefill sweep at tp {tp}; has {[s.tp for s in self.prefill]}")
        return PrefillCurve.from_points(((p.isl, p.ttft_ms) for p in sweep.points), sweep.gpus)

    def decode_curve(self, tp: int) -> DecodeCurve:
        sweep = next((s for s in self.decode if s.tp == tp), None)
        if sweep is None:
            raise KeyError(f"profile has no decode sweep at tp {tp}; has {[s.tp for s in self.decode]}")
        return DecodeCurve.from_points(((p.batch, p.context_tokens, p.itl_ms) for p in sweep.points),
                                       sweep.gpus, sweep.kv_capacity_tokens, sweep.max_batch)

    def selected_tp(self, stage: str) -> int:
        """The selected TP for ``stage``; without a selection, the smallest TP in the profile."""
        if self.selection is not None:
            return int(getattr(self.selection, stage).tp)
        sweeps = self.prefill if stage == "prefill" else self.decode
        return min(s.tp for s in sweeps)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, mode="json"), indent=1)


def _first_error(path: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    extra = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}: field {loc!r}: {err['msg']} (got {shown}){extra}"


def parse_profile(data: Any, source: str = "<profile>") -> Profile:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a profile must be a JSON object")
    if data.get("schema") != SCHEMA:
        raise UserError(f"{source}: field 'schema' is {data.get('schema')!r}; expected {SCHEMA!r}")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise UserError(_first_error(source, exc)) from None


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise UserError(f"{p}: profile file not found") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(p, exc) from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read profile ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return parse_profile(data, str(p))


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write whole or not at all: a temporary file beside the target, renamed over it (atomic on POSIX), so an
    interrupted write never leaves half a profile where a reader (or a re-run) would find it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(profile.to_json() + "\n")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
