"""The ProfileRequest CRD, generated from the pydantic models: ``python -m planner.requests.crd > FILE``.

deploy/crds/profilerequest.yaml is this output (tests/test_requests_crd.py keeps them equal). pydantic's JSON
Schema becomes a Kubernetes structural schema: references inlined, ``X | None`` as ``nullable``, exclusive
bounds in OpenAPI v3.0's boolean form, free-form maps as ``x-kubernetes-preserve-unknown-fields``, no
``additionalProperties: false`` (the API server prunes unknown fields instead). The spec is immutable once
created (a CEL rule), like the request's spec everywhere else; status is a subresource.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from planner.requests.kube import GROUP, KIND, PLURAL, VERSION
from planner.requests.spec import ProfileRequestSpec
from planner.requests.status import Status

KEEP = ("description", "pattern", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems",
        "maxProperties", "enum", "format")
IMMUTABLE = {"rule": "self == oldSelf", "message": "spec is immutable once accepted: create a new ProfileRequest"}
PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "string", "jsonPath": ".status.step"},
    {"name": "Progress", "type": "number", "jsonPath": ".status.progress"},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


class UnsupportedSchema(ValueError):
    pass


def _inline(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in node:
        return node
    target = defs[node["$ref"].rsplit("/", 1)[-1]]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _nullable(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    options = node["anyOf"]
    real = [o for o in options if o.get("type") != "null"]
    if len(real) != 1:
        raise UnsupportedSchema(f"anyOf with {len(real)} non-null options: {options}")
    out = convert({**real[0], **{k: v for k, v in node.items() if k != "anyOf"}}, defs)
    if len(real) != len(options):
        out["nullable"] = True
    return out


def _object(node: dict[str, Any], defs: dict[str, Any], out: dict[str, Any]) -> None:
    if "properties" in node:
        out["properties"] = {k: convert(v, defs) for k, v in node["properties"].items()}
        if node.get("required"):
            out["required"] = list(node["required"])
    elif isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"]:
        out["additionalProperties"] = convert(node["additionalProperties"], defs)
    else:  # dict[str, Any]: free-form
        out["x-kubernetes-preserve-unknown-fields"] = True


def convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One pydantic JSON Schema node as a structural OpenAPI v3.0 schema node."""
    node = _inline(node, defs)
    if "anyOf" in node:
        return _nullable(node, defs)
    kind = node.get("type") or ("string" if "enum" in node or "const" in node else None)
    if kind is None:
        raise UnsupportedSchema(f"no type in {node}")
    out: dict[str, Any] = {"type": kind, **{k: node[k] for k in KEEP if k in node}}
    if "const" in node:
        out["enum"] = [node["const"]]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:
            out[plain], out[bound] = node[bound], True
    if node.get("default") is not None:
        out["default"] = node["default"]
    if kind == "object":
        _object(node, defs, out)
    elif kind == "array":
        out["items"] = convert(node["items"], defs)
    return out


def _schema(model: type, mode: str = "validation") -> dict[str, Any]:
    schema = model.model_json_schema(mode=mode)  # type: ignore[attr-defined]
    return convert(schema, schema.get("$defs", {}))


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def openapi_schema() -> dict[str, Any]:
    spec = {**_schema(ProfileRequestSpec), "x-kubernetes-validations": [IMMUTABLE]}
    status = _schema(Status)
    status["properties"]["observed_generation"] = {
        "type": "integer", "nullable": True, "description": "the metadata.generation this status describes"}
    return _strip_titles({
        "type": "object", "required": ["spec"],
        "description": "A profile request: model + hardware + workload + SLA in; measured profile, TP per "
                       "stage, replicas, advice, a controller policy and manifests out (docs/profile-requests.md).",
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                       "metadata": {"type": "object"}, "spec": spec, "status": status}})


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL,
                           "singular": KIND.lower(), "shortNames": ["profreq"]},
                 "versions": [{"name": VERSION, "served": True, "storage": True,
                               "subresources": {"status": {}}, "additionalPrinterColumns": PRINTER_COLUMNS,
                               "schema": {"openAPIV3Schema": openapi_schema()}}]},
    }


HEADER = ("# Generated by `python -m planner.requests.crd` from planner/requests/spec.py and status.py: do not edit\n"
          "# by hand (tests/test_requests_crd.py fails when this file and the models disagree).\n")


def render() -> str:
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render())
