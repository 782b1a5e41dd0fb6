"""The ProfileRequest CRD: generated from the pydantic models, equal to the one deploy/ ships, a valid
CustomResourceDefinition with a structural schema, and it accepts the documented example."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from planner.requests import crd
from planner.requests.spec import ProfileRequestSpec
from planner.requests.status import Status
from tests.support.requests_support import crd_validator, spec_data
from tests.test_deploy import DEPLOY, K8S_VERSION, REPO

SHIPPED = DEPLOY / "crds" / "profilerequest.yaml"


def test_deploy_ships_exactly_the_generated_crd() -> None:
    assert SHIPPED.read_text() == crd.render(), (
        "deploy/crds/profilerequest.yaml is stale: python -m planner.requests.crd > deploy/crds/profilerequest.yaml")


def test_it_is_a_valid_custom_resource_definition() -> None:
    import kubernetes_validate

    doc = yaml.safe_load(SHIPPED.read_text())
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    (version,) = doc["spec"]["versions"]
    assert version["subresources"] == {"status": {}} and version["storage"] and version["served"]
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["x-kubernetes-validations"] == [crd.IMMUTABLE]


def _walk(node: dict[str, Any], path: str = "") -> list[str]:
    """Kubernetes' structural-schema rules (apiextensions validation) that the generator must respect."""
    problems = []
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    for key in ("$ref", "anyOf", "oneOf", "allOf", "title", "const", "$defs"):
        if key in node:
            problems.append(f"{path}: {key} is not allowed")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if node.get("default", 0) is None:
        problems.append(f"{path}: a null default")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node and node[bound] is not True:
            problems.append(f"{path}: {bound} must be the boolean form")
    for name, child in (node.get("properties") or {}).items():
        problems += _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{path}{{}}")
    return problems


def test_the_schema_is_structural_and_covers_every_field() -> None:
    schema = crd.openapi_schema()
    assert _walk(schema) == []
    assert set(schema["properties"]["spec"]["properties"]) == set(ProfileRequestSpec.model_fields)
    assert set(schema["properties"]["status"]["properties"]) == set(Status.model_fields) | {"observed_generation"}
    ttft = schema["properties"]["spec"]["properties"]["sla"]["properties"]["ttft_ms"]
    assert (ttft["minimum"], ttft["exclusiveMinimum"], ttft["maximum"]) == (0, True, 600_000)


def test_the_generator_refuses_what_kubernetes_cannot_express() -> None:
    with pytest.raises(crd.UnsupportedSchema):
        crd.convert({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    with pytest.raises(crd.UnsupportedSchema):
        crd.convert({"description": "anything"}, {})


def _documented_example() -> dict[str, Any]:
    text = (REPO / "docs" / "profile-requests.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    return next(d for d in (yaml.safe_load(b) for b in blocks) if isinstance(d, dict) and d.get("kind") == "ProfileRequest")


def test_the_documented_example_is_accepted_and_mistakes_are_not() -> None:
    validate = crd_validator()
    example = _documented_example()
    assert validate(example) is None
    ProfileRequestSpec.model_validate(example["spec"])  # and the planner reads it as the same request
    bad = {**example, "spec": spec_data(**{"sla.ttft_ms": 0, "engine": "tgi"})}
    problem = validate(bad)
    assert problem is not None and "ttft_ms" in problem and "engine" in problem
