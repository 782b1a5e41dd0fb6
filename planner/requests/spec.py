"""The profile request (contract): pydantic schema shared by `planner init`, the HTTP API and the CRD.

Field names are the contract (issue 15). Structure and ranges are checked here; what needs the catalog or
more than one field (a known model, a TP that fits, thorough needs an endpoint) is checked in
``planner.requests.checks``, so every error names one field. Accepted specs are frozen: nothing changes a
request once it is queued.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, ValidationError, field_validator

from planner.schema import NoBoolNumbers
from planner.types import MAX_TOKENS

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
Engine = Literal["vllm", "sglang", "trtllm", "dynamo"]
Output = Literal["deployments", "dynamo-graph", "lws"]
Actuator = Literal["keda", "hpa", "kubernetes", "dry-run"]
TraceFormat = Literal["azure", "mooncake", "csv", "jsonl", "servegen"]  # planner.sim.traces.loaders.FORMATS (a test checks)
ENGINES, OUTPUTS, ACTUATORS, TRACE_FORMATS = (get_args(t) for t in (Engine, Output, Actuator, TraceFormat))


class _Strict(NoBoolNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(_Strict):
    name: str | None = Field(None, min_length=1, max_length=256, description="a shipped model by name (profiles/models), "
                             "e.g. qwen3-32b; give name or config")
    config: str | None = Field(None, min_length=1, max_length=1024, description="path to a Hugging Face config.json "
                               "(instead of name)")
    served_name: str | None = Field(None, min_length=1, max_length=256, description="the model the engines load and clients "
                                    "request, e.g. Qwen/Qwen3-32B (default for shipped models)")

    @field_validator("served_name")
    @classmethod
    def _served_name_quotable(cls, v: str | None) -> str | None:
        # It is written into the policy's PromQL selectors (model_name="...") and the engines' command lines.
        if v is not None and any(c.isspace() or c in '"\\{}' for c in v):
            raise ValueError("must be one word without spaces, quotes, backslashes or braces (it goes into "
                             "the engines' command lines and the policy's PromQL selectors)")
        return v


class Hardware(_Strict):
    gpu: str = Field("h200", min_length=1, max_length=64, description="GPU from profiles/hardware.yaml")
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs in one node (a replica with more spans nodes)")
    total_gpus: int | None = Field(None, ge=1, le=100_000, description="GPU budget for all pools; null: no "
                                   "budget")


class TraceRef(_Strict):
    path: str = Field(min_length=1, max_length=1024, description="trace file (planner backtest's formats)")
    format: TraceFormat = "azure"
    columns: dict[str, str] | None = Field(None, max_length=8, description="csv/jsonl: arrival, isl, osl (and time_unit)")
    start_s: float | None = Field(None, ge=0, description="cut: trace time where the workload starts")
    duration_s: float | None = Field(None, gt=0, description="cut: seconds of trace to use")


class Workload(_Strict):
    isl: int | None = Field(None, gt=0, le=MAX_TOKENS, description="mean input length (tokens)")
    osl: int | None = Field(None, gt=0, le=MAX_TOKENS, description="mean output length (tokens)")
    request_rate: float | None = Field(None, gt=0, le=1_000_000, description="requests per second")
    concurrency: int | None = Field(None, ge=1, le=10_000_000, description="requests in flight (instead of "
                                    "request_rate)")
    trace: TraceRef | None = Field(None, description="derive isl, osl and the rate from a trace instead")


class SLA(_Strict):
    ttft_ms: float = Field(gt=0, le=600_000, description="time-to-first-token target (ms)")
    itl_ms: float = Field(gt=0, le=60_000, description="inter-token latency target (ms)")
    percentile: float = Field(95.0, ge=50.0, le=99.9, description="percentile the targets hold at")


class ProfileRequestSpec(_Strict):
    model: ModelRef
    hardware: Hardware = Field(default_factory=Hardware)
    workload: Workload
    sla: SLA
    search: Literal["rapid", "thorough"] = Field("rapid", description="rapid: analytical model (seconds); "
                                                 "thorough: measured (endpoint or deployment_template)")
    engine: Engine = "vllm"
    tp: list[int] | None = Field(None, min_length=1, max_length=16, description="TP candidates (default 1, 2, "
                                 "4, 8 within what one replica may use)")
    endpoint: str | None = Field(None, max_length=2048, pattern=r"^https?://", description="thorough: the OpenAI-compatible "
                                 "server to measure")
    deployment_template: str | None = Field(None, min_length=1, max_length=262_144, description="thorough: a "
                                            "manifest (YAML) the kubernetes backend deploys at each TP")
    output: Output = "deployments"
    auto_apply: bool = Field(False, description="in a cluster: create the manifests when Ready")
    mode: Literal["auto", "aggregated", "disaggregated"] = Field("auto", description="auto: follow the "
                                                                 "aggregated-vs-disaggregated advice")
    actuator: Actuator = Field("keda", description="how the controller applies its replicas (which objects are "
                               "rendered)")
    name: str | None = Field(None, max_length=40, pattern=DNS_LABEL, description="base name of the rendered "
                             "objects (default: the model's)")
    namespace: str | None = Field(None, max_length=63, pattern=DNS_LABEL, description="namespace of the "
                                  "rendered objects (default: default; in a cluster the request's own)")
    image: str | None = Field(None, min_length=1, max_length=512, description="engine image (default: the engine's pinned "
                              "image)")
    kv_link_gbps: float | None = Field(None, gt=0, le=100_000, description="prefill->decode KV link, Gb/s "
                                       "(default: the GPU's NIC)")
    scale_to_zero_after_s: float | None = Field(None, ge=0, le=86_400, description="the pools go to zero after "
                                                "this long without a request (min_replicas 0) and wake on the "
                                                "next; keda and kubernetes actuators (default: never)")


class FieldError(Exception):
    """One field is wrong: ``field`` is its dotted path in the spec (``sla.ttft_ms``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class RequestInvalid(Exception):
    """The request is malformed; ``errors`` name each bad field."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors

    def detail(self) -> list[dict[str, Any]]:
        """FastAPI's 422 shape, so structural and semantic errors read alike."""
        return [{"loc": ["body", *e.field.split(".")], "msg": e.message, "type": "value_error"}
                for e in self.errors]


def error_message(err: Any) -> str:
    """One pydantic error as a message naming the value and what is allowed."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required"
    value = err.get("input")
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r}: must be a finite number"
    if isinstance(value, dict | list) or value is None:
        return msg
    return f"{value!r}: {msg}"


def field_errors(exc: ValidationError) -> list[FieldError]:
    return [FieldError(".".join(str(p) for p in err["loc"]) or "spec", error_message(err)) for err in exc.errors()]


def parse_spec(data: Any) -> ProfileRequestSpec:
    """A spec from JSON/YAML data, or RequestInvalid naming every bad field."""
    if not isinstance(data, dict):
        raise RequestInvalid([FieldError("spec", "a profile request must be a mapping")])
    try:
        return ProfileRequestSpec.model_validate(data)
    except ValidationError as exc:
        raise RequestInvalid(field_errors(exc)) from None
