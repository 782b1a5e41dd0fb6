"""Checks that need the catalog or several fields, and what they resolve: each failure names one field.

Run when a request is submitted (HTTP 422, CLI exit 2, a ProfileRequest marked Failed/InvalidSpec), before
any work is queued. What only the sweep can tell (an SLA below the physical floor, a load above the GPU
budget) fails later, in the pipeline, with numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import load_hardware, load_model
from planner.errors import UserError
from planner.perf import roofline
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profiler.grids import DEFAULT_TP
from planner.profiler.k8s_worker import load_template
from planner.requests.engines import ENGINES, SERVED_NAMES
from planner.requests.spec import FieldError, ProfileRequestSpec, RequestInvalid
from planner.requests.workload import check_readable

MAX_TP = 64


@dataclass(frozen=True)
class Resolved:
    """A checked request and what it names: model, hardware, TP candidates, object names."""

    spec: ProfileRequestSpec
    model: ModelSpec
    hardware: HardwareSpec
    tp: tuple[int, ...]
    served_name: str
    name: str
    namespace: str

    @property
    def backend(self) -> str:
        if self.spec.search == "rapid":
            return "analytical"
        return "endpoint" if self.spec.endpoint else "kubernetes"

    def nodes(self, tp: int) -> int:
        """Nodes one replica of ``tp`` GPUs spans."""
        return math.ceil(tp / self.spec.hardware.gpus_per_node)


def _model(spec: ProfileRequestSpec) -> tuple[ModelSpec, str]:
    ref = spec.model
    if (ref.name is None) == (ref.config is None):
        raise FieldError("model", "give exactly one of model.name (a shipped model) and model.config (a "
                         "config.json path)")
    field = "model.name" if ref.name is not None else "model.config"
    try:
        model = load_model(ref.name or ref.config or "")
    except UserError as exc:
        raise FieldError(field, str(exc).removeprefix("model: ")) from None
    served = ref.served_name or SERVED_NAMES.get((ref.name or "").lower())
    if served is None:
        raise FieldError("model.served_name", "required with model.config: the model the engines load (e.g. a "
                         "Hugging Face repository id)")
    return model, served


def _hardware(spec: ProfileRequestSpec) -> HardwareSpec:
    try:
        return load_hardware(spec.hardware.gpu)
    except UserError as exc:
        raise FieldError("hardware.gpu", str(exc).removeprefix("gpu: ")) from None


def _placement_limit(spec: ProfileRequestSpec) -> tuple[int, str]:
    """Largest TP one replica may have, and why."""
    hw = spec.hardware
    limit, why = MAX_TP, f"at most {MAX_TP}"
    if spec.output == "deployments" or not ENGINES[spec.engine].multinode:
        limit, why = hw.gpus_per_node, (f"one replica is one pod on one node of hardware.gpus_per_node "
                                        f"{hw.gpus_per_node} (output lws or dynamo-graph spans nodes)")
    if hw.total_gpus is not None and hw.total_gpus < limit:
        limit, why = hw.total_gpus, f"hardware.total_gpus is {hw.total_gpus}"
    return limit, why


def _fits(model: ModelSpec, hw: HardwareSpec, tp: int) -> bool:
    return roofline.kv_capacity_tokens(model, hw, tp) > 0


def _tp_candidates(spec: ProfileRequestSpec, model: ModelSpec, hw: HardwareSpec) -> tuple[int, ...]:
    limit, why = _placement_limit(spec)
    given = spec.tp is not None
    candidates = tuple(spec.tp) if spec.tp is not None else tuple(t for t in DEFAULT_TP if t <= limit)
    if given:
        if len(set(candidates)) != len(candidates):
            raise FieldError("tp", f"duplicate values in {list(candidates)}")
        for t in candidates:
            why_not = model.check_tp(t) if t >= 1 else f"{t} must be >= 1"
            if t > limit:
                why_not = f"tp {t} exceeds what one replica may use: {why}"
            if why_not:
                raise FieldError("tp", why_not)
    usable = tuple(t for t in candidates if model.check_tp(t) is None and _fits(model, hw, t))
    if not usable:
        smallest = next((t for t in (1, 2, 4, 8, 16, 32, 64) if model.check_tp(t) is None and _fits(model, hw, t)),
                        None)
        need = f"it fits from TP {smallest}" if smallest else "it fits on no TP up to 64"
        raise FieldError("model", f"{model.name} ({model.weight_bytes / 1e9:.0f} GB of weights) fits on no TP of "
                         f"{list(candidates)} on {hw.name} ({hw.memory_bytes / 1e9:.0f} GB per GPU): {need}; "
                         f"TP candidates stop at {_placement_limit(spec)[0]} because {why}")
    return usable


def _search(spec: ProfileRequestSpec) -> None:
    if spec.search == "rapid":
        for field in ("endpoint", "deployment_template"):
            if getattr(spec, field) is not None:
                raise FieldError(field, "used only by search thorough (rapid is the analytical model)")
        return
    if (spec.endpoint is None) == (spec.deployment_template is None):
        raise FieldError("search", "thorough measures: give exactly one of endpoint (a running server) and "
                         "deployment_template (deployed at each TP)")
    if spec.deployment_template is not None:
        try:  # read now: a manifest the sweep could not deploy is the request's error (422), not a Failed run
            load_template(spec.deployment_template)
        except UserError as exc:
            raise FieldError("deployment_template", str(exc).removeprefix("template: ")) from None
    if spec.endpoint is not None and (spec.tp is None or len(spec.tp) != 1):
        raise FieldError("tp", "search thorough with an endpoint measures the one server at that URL: give "
                         "exactly one tp, the one it runs")


def _combinations(spec: ProfileRequestSpec) -> None:
    if spec.engine == "dynamo" and spec.output != "dynamo-graph":
        raise FieldError("engine", "dynamo runs under the Dynamo operator: use output dynamo-graph (with "
                         "engine vllm, sglang or trtllm for its backend)")
    if spec.engine == "trtllm" and spec.output != "dynamo-graph" and spec.mode == "disaggregated":
        raise FieldError("mode", "TensorRT-LLM disaggregated serving is rendered through Dynamo: use output "
                         "dynamo-graph, or mode aggregated")
    if spec.engine == "trtllm" and spec.output == "lws":
        raise FieldError("output", "lws renders multi-node vLLM and SGLang replicas; TensorRT-LLM's multi-node "
                         "launch (MPI) is not rendered: use output deployments or dynamo-graph")
    if spec.scale_to_zero_after_s is not None and spec.actuator == "hpa":
        raise FieldError("scale_to_zero_after_s", "an HPA never scales below one replica (minReplicas >= 1): "
                         "use actuator keda or kubernetes to scale to zero")
    if spec.auto_apply and spec.actuator == "kubernetes":
        raise FieldError("auto_apply", "with actuator kubernetes the manifests include a Role for the "
                         "controller; the profiler does not grant RBAC: apply them yourself, or choose keda, "
                         "hpa or dry-run")


def _workload(spec: ProfileRequestSpec) -> None:
    w = spec.workload
    explicit = [f for f in ("isl", "osl", "request_rate", "concurrency") if getattr(w, f) is not None]
    if w.trace is not None:
        if explicit:
            raise FieldError(f"workload.{explicit[0]}", "give either workload.trace or isl/osl with a rate, "
                             "not both")
        if Path(w.trace.path).is_dir():
            raise FieldError("workload.trace.path", f"{w.trace.path}: a directory, not a trace file")
        if not Path(w.trace.path).is_file():
            raise FieldError("workload.trace.path", f"{w.trace.path}: file not found")
        check_readable(w)
        return
    for field in ("isl", "osl"):
        if getattr(w, field) is None:
            raise FieldError(f"workload.{field}", "required (or give workload.trace)")
    if (w.request_rate is None) == (w.concurrency is None):
        raise FieldError("workload.request_rate", "give exactly one of request_rate and concurrency")


def _name(spec: ProfileRequestSpec, model: ModelSpec) -> str:
    if spec.name is not None:
        return spec.name
    base = re.sub(r"[^a-z0-9-]+", "-", model.name.lower()).strip("-")[:40].strip("-")
    return base or "model"


def check(spec: ProfileRequestSpec, default_namespace: str = "default") -> Resolved:
    """Resolve the request or raise RequestInvalid with every field that is wrong (one per check)."""
    errors: list[FieldError] = []
    for step in (_search, _combinations, _workload):
        try:
            step(spec)
        except FieldError as exc:
            errors.append(exc)
    try:
        model, served = _model(spec)
        hardware = _hardware(spec)
        tp = _tp_candidates(spec, model, hardware)
    except FieldError as exc:
        errors.append(exc)
    if errors:
        raise RequestInvalid(errors)
    return Resolved(spec, model, hardware, tp, served, _name(spec, model), spec.namespace or default_namespace)
