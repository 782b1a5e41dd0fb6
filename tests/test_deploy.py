"""deploy/: every overlay renders with `kubectl kustomize` and every object validates.

How each object is validated:
- built-in kinds (ServiceAccount, Role, RoleBinding, ConfigMap, Service, Deployment, HPA): the Kubernetes
  1.34 OpenAPI-derived JSON schemas bundled in the PyPI package kubernetes-validate, strict mode (unknown
  fields are errors). 1.34 is the first release where HPA behavior ``tolerance`` is beta and on by default;
- KEDA ScaledObject (a CRD, whose schema is not in that package and not fetched from the network): the
  JSON schema below, written from the ScaledObject spec in INTEGRATION.md §2.1-2.4 (closed objects, enums
  for metricType and fallback behavior, required fields per trigger type), and its embedded
  ``advanced.horizontalPodAutoscalerConfig.behavior`` with the real autoscaling/v2 schema (by wrapping it
  in an HPA);
- cross-object semantics: RBAC equals INTEGRATION.md §4.3, policies parse with the planner's own loader,
  KEDA URLs/addresses point at the planner Service, targets and min/max agree with the policy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import jsonschema
import pytest
import yaml

from planner.config import parse_policy
from planner.profile import load_profile
from planner.telemetry import exported_series_names

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
OVERLAYS = {"direct": "kubernetes", "keda": "keda", "keda-external": "keda", "hpa": "hpa"}
K8S_VERSION = "1.34.0"


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl (with built-in kustomize) is required under CI but is not on PATH")
        pytest.skip("kubectl (with built-in kustomize) is not installed")
    return path


def render(target: Path) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module", params=sorted(OVERLAYS))
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    return request.param, render(DEPLOY / "overlays" / request.param)


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def policy_of(objs: list[dict], tmp_path: Path):  # noqa: ANN201
    cm = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("planner-policy"))
    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text)
    return parse_policy(yaml.safe_load(cm["data"]["policy.yaml"]), "policy.yaml", tmp_path)


# ----------------------------------------------------------------------------------------- schemas
SCALING_POLICY = {"type": "object", "additionalProperties": False, "required": ["type", "value", "periodSeconds"],
                  "properties": {"type": {"enum": ["Pods", "Percent"]}, "value": {"type": "integer", "minimum": 1},
                                 "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800}}}
TRIGGER_METADATA = {
    "metrics-api": {"required": ["url", "valueLocation", "targetValue"],
                    "allowed": ["url", "valueLocation", "format", "targetValue", "activationTargetValue", "unsafeSsl",
                                "timeout", "aggregateFromKubeServiceEndpoints", "aggregationType", "authMode",
                                "method", "keyParamName"]},
    "external": {"required": ["scalerAddress"], "allowed": None},  # the whole map reaches the scaler
    "external-push": {"required": ["scalerAddress"], "allowed": None},
    "prometheus": {"required": ["serverAddress", "query", "threshold"],
                   "allowed": ["serverAddress", "query", "threshold", "activationThreshold", "namespace",
                               "customHeaders", "queryParameters", "ignoreNullValues", "unsafeSsl", "timeout",
                               "awsRegion", "identityOwner"]},
}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SCALED_OBJECT = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object", "additionalProperties": False, "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {"type": "object", "additionalProperties": False, "required": ["name"],
                                   "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                                  "name": {"type": "string"},
                                                  "envSourceContainerName": {"type": "string"}}},
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {"type": "object", "additionalProperties": False,
                             "required": ["failureThreshold", "replicas"],
                             "properties": {"failureThreshold": {"type": "integer", "minimum": 1},
                                            "replicas": {"type": "integer", "minimum": 0},
                                            "behavior": {"enum": ["static", "currentReplicas",
                                                                  "currentReplicasIfHigher",
                                                                  "currentReplicasIfLower", "scalingModifiers"]}}},
                "advanced": {"type": "object", "additionalProperties": False, "properties": {
                    "restoreToOriginalReplicaCount": {"type": "boolean"},
                    "horizontalPodAutoscalerConfig": {"type": "object", "additionalProperties": False,
                                                      "properties": {"name": {"type": "string"},
                                                                     "behavior": {"type": "object"}}},
                    "scalingModifiers": {"type": "object"}}},
                "triggers": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["type", "metadata"],
                    "properties": {"type": {"type": "string"}, "name": {"type": "string"},
                                   "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                                   "useCachedMetrics": {"type": "boolean"},
                                   "authenticationRef": {"type": "object"}, "metadata": STRING_MAP}}},
            },
        },
    },
}


def validate_scaled_object(obj: dict) -> None:
    import kubernetes_validate

    jsonschema.validate(obj, SCALED_OBJECT)
    spec = obj["spec"]
    assert spec.get("idleReplicaCount", -1) < spec.get("minReplicaCount", 0) or "idleReplicaCount" not in spec
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100)
    for trigger in spec["triggers"]:
        assert "metricType" not in trigger["metadata"], "metricType belongs at trigger level (§2.5 item 6)"
        rules = TRIGGER_METADATA.get(trigger["type"])
        assert rules is not None, f"trigger type {trigger['type']} not covered by this check"
        missing = [k for k in rules["required"] if k not in trigger["metadata"]]
        assert not missing, f"{obj['metadata']['name']}: trigger {trigger['type']} lacks {missing}"
        if rules["allowed"] is not None:
            unknown = set(trigger["metadata"]) - set(rules["allowed"])
            assert not unknown, f"{obj['metadata']['name']}: unknown {trigger['type']} metadata {unknown}"
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:  # copied verbatim into the HPA: validate it with the real autoscaling/v2 schema
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 2,
                        "behavior": behavior}}
        kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    for rules in (behavior or {}).values():
        for p in rules.get("policies", []):
            jsonschema.validate(p, SCALING_POLICY)


# ----------------------------------------------------------------------------------------- tests
def test_every_object_validates(overlay: tuple[str, list[dict]]) -> None:
    import kubernetes_validate

    name, objs = overlay
    kinds = sorted(o["kind"] for o in objs)
    for obj in objs:
        if obj["kind"] == "ScaledObject":
            validate_scaled_object(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    expected = {"direct": [], "keda": ["ScaledObject"] * 2, "keda-external": ["ScaledObject"] * 2,
                "hpa": ["HorizontalPodAutoscaler"] * 2}[name]
    assert kinds == sorted(["ConfigMap", "ConfigMap", "Deployment", "Role", "RoleBinding", "Service",
                            "ServiceAccount", *expected])
    assert {o["metadata"].get("namespace") for o in objs} == {"llm"}


def test_validation_catches_mistakes() -> None:
    import kubernetes_validate

    bad_so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x", "namespace": "n"},
              "spec": {"scaleTargetRef": {"name": "x"}, "triggers": [
                  {"type": "metrics-api", "metadata": {"url": "u", "valueLocation": "desired", "targetValue": "1",
                                                       "metricType": "AverageValue"}}]}}
    with pytest.raises(AssertionError, match="metricType belongs at trigger level"):
        validate_scaled_object(bad_so)
    bad_so["spec"]["triggers"][0]["metadata"].pop("metricType")
    bad_so["spec"]["fallback"] = {"failureThreshold": 3, "replicas": 2, "behavior": "sometimes"}
    with pytest.raises(jsonschema.ValidationError):
        validate_scaled_object(bad_so)
    bad_hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 2,
                        "behavior": {"scaleUp": {"stabilizationWindow": 0}}}}
    with pytest.raises(Exception, match="stabilizationWindow"):
        kubernetes_validate.validate(bad_hpa, K8S_VERSION, strict=True)


RBAC_4_3 = [
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["deployments/scale", "statefulsets/scale"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets/scale"],
     "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["nvidia.com"], "resources": ["dynamographdeployments", "dynamographdeploymentscalingadapters"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["nvidia.com"], "resources": ["dynamographdeploymentscalingadapters/scale"],
     "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]


def test_rbac_is_exactly_integration_4_3(overlay: tuple[str, list[dict]]) -> None:
    _, objs = overlay
    (role,) = by_kind(objs, "Role")
    (binding,) = by_kind(objs, "RoleBinding")
    (sa,) = by_kind(objs, "ServiceAccount")
    (deploy,) = by_kind(objs, "Deployment")
    assert role["rules"] == RBAC_4_3
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "llm"}]
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_deployment_runs_the_policy_and_serves_the_ports(overlay: tuple[str, list[dict]], tmp_path: Path) -> None:
    name, objs = overlay
    (deploy,) = by_kind(objs, "Deployment")
    (svc,) = by_kind(objs, "Service")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["command"] + container["args"]
    assert argv[:4] == ["planner", "run", "--policy", "/etc/planner/policy.yaml"]
    assert ("--leader-elect" in argv) is (name == "direct")
    policy_cm = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("planner-policy"))
    (volume,) = pod["volumes"]
    assert volume["configMap"]["name"] == policy_cm["metadata"]["name"]  # kustomize rewrote the hashed name
    assert container["volumeMounts"][0]["mountPath"] == "/etc/planner"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "grpc": 9090}
    assert argv[argv.index("--port") + 1] == "8080" and argv[argv.index("--grpc-port") + 1] == "9090"
    assert {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]} == {"http": "http", "grpc": "grpc"}
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    policy = policy_of(objs, tmp_path)
    assert policy.actuator.kind == OVERLAYS[name]
    assert load_profile(policy.profile).model.name  # the profile ships in the same ConfigMap and loads


def _pool_scalers(objs: list[dict]) -> list[tuple[dict, str]]:
    out = []
    for so in by_kind(objs, "ScaledObject"):
        for t in so["spec"]["triggers"]:
            meta = t["metadata"]
            pool = meta.get("pool") or parse_qs(urlparse(meta.get("url", "")).query).get("pool", [""])[0]
            out.append((so, pool))
    return out


@pytest.mark.parametrize("name", ["keda", "keda-external"])
def test_keda_scaled_objects_hold_exactly_n(name: str, tmp_path: Path) -> None:
    objs = render(DEPLOY / "overlays" / name)
    policy = policy_of(objs, tmp_path)
    (svc,) = by_kind(objs, "Service")
    svc_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    host = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local"
    scalers = _pool_scalers(objs)
    assert sorted(pool for _, pool in scalers) == sorted(policy.pool_names())
    for so, pool in scalers:
        spec = so["spec"]
        (trigger,) = spec["triggers"]
        assert trigger["metricType"] == "AverageValue"
        if name == "keda":
            url = urlparse(trigger["metadata"]["url"])
            assert (url.hostname, url.port, url.path) == (host, svc_ports["http"], "/v1/desired")
            assert trigger["metadata"]["valueLocation"] == "desired" and trigger["metadata"]["targetValue"] == "1"
        else:
            assert trigger["type"] == "external"
            assert trigger["metadata"]["scalerAddress"] == f"{host}:{svc_ports['grpc']}"
        target = policy.pool(pool).target
        assert spec["scaleTargetRef"] == {"apiVersion": target.api_version, "kind": target.kind, "name": target.name}
        assert so["metadata"]["namespace"] == target.namespace
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (policy.pool(pool).min_replicas,
                                                                       policy.pool(pool).max_replicas)
        assert spec["fallback"]["replicas"] >= spec["minReplicaCount"]
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        for direction in ("scaleUp", "scaleDown"):
            assert behavior[direction]["stabilizationWindowSeconds"] == 0
            assert behavior[direction]["tolerance"] == "0"


def test_hpa_reads_planner_desired_replicas(tmp_path: Path) -> None:
    objs = render(DEPLOY / "overlays" / "hpa")
    policy = policy_of(objs, tmp_path)
    hpas = by_kind(objs, "HorizontalPodAutoscaler")
    assert len(hpas) == len(policy.pool_names())
    for hpa in hpas:
        (metric,) = hpa["spec"]["metrics"]
        ext = metric["external"]
        assert ext["metric"]["name"] in exported_series_names()
        pool = ext["metric"]["selector"]["matchLabels"]["pool"]
        assert ext["metric"]["selector"]["matchLabels"]["policy"] == policy.name
        assert ext["target"] == {"type": "AverageValue", "averageValue": "1"}
        target = policy.pool(pool).target
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": target.api_version, "kind": target.kind,
                                                 "name": target.name}
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (policy.pool(pool).min_replicas,
                                                                            policy.pool(pool).max_replicas)
    values = yaml.safe_load((DEPLOY / "overlays" / "hpa" / "prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["external"]
    assert rule["seriesQuery"].split("{")[0] in exported_series_names()
    assert rule["name"]["as"] == hpas[0]["spec"]["metrics"][0]["external"]["metric"]["name"]


def test_dashboard_config_map(overlay: tuple[str, list[dict]]) -> None:
    _, objs = overlay
    (cm,) = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "planner-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["planner.json"]) == json.loads((REPO / "dashboards" / "planner.json").read_text())
    assert len(json.dumps(cm).encode()) < 256 * 1024  # fits the client-side apply annotation, let alone 1 MiB


def test_base_is_namespace_agnostic() -> None:
    objs = render(DEPLOY / "base")
    assert all("namespace" not in o["metadata"] for o in objs)


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_overlay_policies_differ_from_base_only_in_actuator(name: str) -> None:
    base = yaml.safe_load((DEPLOY / "base" / "policy.yaml").read_text())
    mine = yaml.safe_load((DEPLOY / "overlays" / name / "policy.yaml").read_text())
    assert mine.pop("actuator") == {"kind": OVERLAYS[name]}
    base.pop("actuator")
    assert mine == base
