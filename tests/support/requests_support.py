"""Shared pieces of the profile-request tests: a valid spec, the CRD's schema as a validator, a backend that
waits until released (to catch a request mid-sweep), and the kinds a cluster serves."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jsonschema
import pytest

from planner.profiler import backends
from planner.requests.crd import openapi_schema
from planner.requests.kube import APPLY_KINDS, GROUP, KIND, PLURAL, VERSION

BASE: dict[str, Any] = {
    "model": {"name": "qwen3-32b"},
    "hardware": {"gpu": "h200", "gpus_per_node": 8, "total_gpus": 64},
    "workload": {"isl": 1200, "osl": 220, "request_rate": 20.0},
    "sla": {"ttft_ms": 1000, "itl_ms": 40, "percentile": 95},
}


def spec_data(**overrides: Any) -> dict[str, Any]:
    """BASE with top-level keys replaced; a dotted key (``"sla.ttft_ms"``) sets one nested field."""
    data = copy.deepcopy(BASE)
    for key, value in overrides.items():
        *parents, leaf = key.split(".") if "." in key else [key]
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        if value is _DROP:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return data


_DROP = object()
DROP = _DROP  # spec_data(**{"workload.request_rate": DROP}) removes the field


def _json_schema(node: Any) -> Any:
    """The CRD's OpenAPI v3.0 schema as JSON Schema draft 4 (nullable -> a null type; x- keys dropped)."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes") and k != "nullable"}
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if node.get("type") == "object" and "properties" in node:
        out["additionalProperties"] = False  # the API server prunes unknown fields; here they are errors
    return out


def crd_validator() -> Any:
    """What the API server checks on a ProfileRequest write, from the CRD this repository ships."""
    schema = _json_schema(openapi_schema())
    schema["properties"]["metadata"] = {"type": "object"}
    validator = jsonschema.Draft4Validator(schema)

    def validate(obj: dict[str, Any]) -> str | None:
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
        if not errors:
            return None
        return "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)

    return validate


VERSIONS = {"Deployment": "v1", "LeaderWorkerSet": "v1", "DynamoGraphDeployment": "v1alpha1",
            "ScaledObject": "v1alpha1", "HorizontalPodAutoscaler": "v2"}


def install(kube: Any, kinds: tuple[str, ...] = tuple(APPLY_KINDS)) -> None:
    """The ProfileRequest CRD (schema-checked, immutable spec) and the kinds auto_apply creates."""
    kube.define(GROUP, VERSION, PLURAL, KIND, immutable_spec=True, validate=crd_validator())
    for kind in kinds:
        group, plural = APPLY_KINDS[kind]
        kube.define(group, VERSIONS[kind], plural, kind, status_subresource=kind != "DynamoGraphDeployment")


class BlockingBackend:
    """The analytical backend, but every call waits for ``release`` (and counts calls)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = 0
        self._real = backends.BACKENDS["analytical"]

    def __call__(self, model: Any, hw: Any, req: Any) -> Any:
        self.calls += 1
        self.started.set()
        assert self.release.wait(30), "the test never released the backend"
        return self._real(model, hw, req)


@contextmanager
def blocking_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlockingBackend]:
    backend = BlockingBackend()
    monkeypatch.setitem(backends.BACKENDS, "analytical", backend)
    try:
        yield backend
    finally:
        backend.release.set()
