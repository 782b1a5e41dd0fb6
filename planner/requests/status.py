"""The request's lifecycle (contract) and its status record; transitions take the time, never read it.

``phase``: Pending -> Profiling -> Ready | Failed. While Profiling, ``step`` is one of SweepingPrefill,
SweepingDecode, SelectingConfig, BuildingCurves, Rendering, in that order, and ``progress`` (0..1) moves
through each step's share. Conditions follow Kubernetes' shape (type, status, reason, message, time), so
``kubectl wait --for=condition=Ready profilerequest/x`` works on the CRD.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.types import Mode


class Phase(StrEnum):
    PENDING = "Pending"
    PROFILING = "Profiling"
    READY = "Ready"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.READY, Phase.FAILED)


class Step(StrEnum):
    SWEEPING_PREFILL = "SweepingPrefill"
    SWEEPING_DECODE = "SweepingDecode"
    SELECTING_CONFIG = "SelectingConfig"
    BUILDING_CURVES = "BuildingCurves"
    RENDERING = "Rendering"


class FailReason(StrEnum):
    INVALID_SPEC = "InvalidSpec"
    SLA_INFEASIBLE = "SLAInfeasible"  # below the physical floor, or not at this load
    OVER_BUDGET = "OverBudget"  # the load needs more GPUs than hardware.total_gpus
    UNSUPPORTED = "Unsupported"  # a combination the renderer does not produce
    BACKEND_UNAVAILABLE = "BackendUnavailable"
    BACKEND_ERROR = "BackendError"
    APPLY_FAILED = "ApplyFailed"
    CANCELLED = "Cancelled"
    INTERRUPTED = "Interrupted"  # the server stopped while the request was running
    INTERNAL_ERROR = "InternalError"


# Share of progress each step covers: sweeps dominate for measured backends.
STEP_SPAN: dict[Step, tuple[float, float]] = {
    Step.SWEEPING_PREFILL: (0.0, 0.4), Step.SWEEPING_DECODE: (0.4, 0.8), Step.SELECTING_CONFIG: (0.8, 0.85),
    Step.BUILDING_CURVES: (0.85, 0.9), Step.RENDERING: (0.9, 1.0)}


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_Record):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str


class StepRecord(_Record):
    step: Step
    started_at: str
    finished_at: str | None = None


class StageResult(_Record):
    tp: int
    gpus_per_replica: int
    replicas: int
    gpus: int
    latency_ms: float | None = Field(None, description="predicted TTFT (prefill) or ITL (decode) at the load")
    target_ms: float
    tokens_per_s_per_gpu: float
    batch: int | None = Field(None, description="decode: the largest batch meeting ITL that fits the KV cache")
    reason: str


class Advice(_Record):
    mode: Mode
    kv_bytes: float
    transfer_ms: float
    prefill_ms: float
    interference_itl_budgets: float = Field(description="one prefill's time in ITL targets (decode stall)")
    link_gbps: float
    reason: str


class LoadResult(_Record):
    isl: int
    osl: int
    rate_rps: float
    peak_rate_rps: float
    source: str


class Result(_Record):
    mode: Mode
    backend: str
    load: LoadResult
    advice: Advice
    pools: dict[str, StageResult]
    gpus: int
    predicted_ttft_ms: float | None = None
    predicted_itl_ms: float | None = None
    artifacts: list[str] = Field(default_factory=list)
    applied: list[str] = Field(default_factory=list, description="objects created by auto_apply (kind/name)")


class Status(_Record):
    phase: Phase = Phase.PENDING
    step: Step | None = None
    progress: float = Field(0.0, ge=0.0, le=1.0)
    message: str = ""
    reason: str | None = Field(None, description="why it failed (a FailReason)")
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    result: Result | None = None
    closest: dict[str, Any] | None = Field(None, description="infeasible: the closest configuration and its "
                                           "miss")


def _condition(status: Status, kind: str, value: str, reason: str, message: str, now: str) -> list[Condition]:
    kept = [c for c in status.conditions if c.type != kind]
    old = next((c for c in status.conditions if c.type == kind), None)
    since = old.last_transition_time if old is not None and old.status == value else now
    return [*kept, Condition(type=kind, status=value, reason=reason, message=message,  # type: ignore[arg-type]
                             last_transition_time=since)]


def pending(now: str, message: str = "queued") -> Status:
    base = Status(created_at=now, message=message)
    return base.model_copy(update={"conditions": _condition(base, "Accepted", "True", "Valid", "spec accepted",
                                                            now)})


def enter_step(status: Status, step: Step, now: str, message: str = "") -> Status:
    return status.model_copy(update={
        "phase": Phase.PROFILING, "step": step, "progress": STEP_SPAN[step][0], "message": message or step.value,
        "started_at": status.started_at or now,
        "steps": [*_close_steps(status, now), StepRecord(step=step, started_at=now)],
        "conditions": _condition(status, "Ready", "False", "Profiling", step.value, now)})


def step_progress(status: Status, fraction: float, message: str = "") -> Status:
    assert status.step is not None
    lo, hi = STEP_SPAN[status.step]
    value = lo + (hi - lo) * min(1.0, max(0.0, fraction))
    return status.model_copy(update={"progress": round(value, 4), "message": message or status.message})


def _close_steps(status: Status, now: str) -> list[StepRecord]:
    return [s if s.finished_at else s.model_copy(update={"finished_at": now}) for s in status.steps]


def ready(status: Status, result: Result, now: str) -> Status:
    msg = f"{result.mode.value}: " + ", ".join(f"{p} {r.replicas} x TP{r.tp}" for p, r in result.pools.items())
    return status.model_copy(update={
        "phase": Phase.READY, "step": None, "progress": 1.0, "message": msg, "finished_at": now,
        "steps": _close_steps(status, now), "result": result,
        "conditions": _condition(status, "Ready", "True", "Ready", msg, now)})


def failed(status: Status, reason: FailReason, message: str, now: str,
           closest: dict[str, Any] | None = None) -> Status:
    conditions = _condition(status, "Ready", "False", reason.value, message, now)
    if reason is FailReason.INVALID_SPEC:  # never accepted
        conditions = _condition(status.model_copy(update={"conditions": conditions}), "Accepted", "False",
                                reason.value, message, now)
    return status.model_copy(update={
        "phase": Phase.FAILED, "reason": reason.value, "message": message, "finished_at": now,
        "steps": _close_steps(status, now), "conditions": conditions, "closest": closest, "result": None})
