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
- ServiceMonitor/PodMonitor (monitoring.coreos.com/v1 CRDs; no maintained schema source is available
  offline): the closed JSON schemas below, written from prometheus-operator's API types (field names as in
  its v1 Go types: spec.selector required, endpoints/podMetricsEndpoints, RelabelConfig and its action
  enum), and the engine PodMonitors' relabelling run by a real Prometheus;
- cross-object semantics: the one policy parses with the planner's own loader and each overlay changes only
  actuator.kind, the namespace is set once, KEDA URLs/addresses point at the planner Service, targets and
  min/max agree with the policy. RBAC: tests/test_rbac.py; image and Dockerfile: tests/test_dockerfile.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import jsonschema
import pytest
import yaml

from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.telemetry import exported_series_names

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
OVERLAYS = {"advisory": "dry-run", "direct": "kubernetes", "keda": "keda", "keda-external": "keda", "hpa": "hpa"}
NAMESPACE = "llm"  # deploy/components/namespace
K8S_VERSION = "1.34.0"
DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))  # generated: python -m planner.dashboards


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


# prometheus-operator monitoring.coreos.com/v1 (field names from its Go API types, pkg/apis/monitoring/v1).
LABEL_NAME = {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}
DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                                         "(([0-9]+)s)?(([0-9]+)ms)?)$"}
RELABEL_ACTIONS = ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase",
                   "uppercase", "keepequal", "dropequal"]
RELABEL_CONFIG = {"type": "object", "additionalProperties": False, "properties": {
    "action": {"enum": RELABEL_ACTIONS + [a.capitalize() for a in RELABEL_ACTIONS]
               + ["HashMod", "LabelMap", "LabelDrop", "LabelKeep", "KeepEqual", "DropEqual"]},
    "modulus": {"type": "integer", "minimum": 1}, "regex": {"type": "string"},
    "replacement": {"type": "string"}, "separator": {"type": "string"},
    "sourceLabels": {"type": "array", "items": LABEL_NAME}, "targetLabel": {"type": "string"}}}
LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": STRING_MAP,
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["key", "operator"],
        "properties": {"key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                       "values": {"type": "array", "items": {"type": "string"}}}}}}}
SCRAPE_ENDPOINT = {  # PodMetricsEndpoint / Endpoint: the fields both have (HTTP client settings as objects)
    "interval": DURATION, "scrapeTimeout": DURATION, "path": {"type": "string", "pattern": "^/"},
    "port": {"type": "string"}, "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
    "params": {"type": "object"}, "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
    "trackTimestampsStaleness": {"type": "boolean"}, "filterRunning": {"type": "boolean"},
    "targetPort": {"type": ["integer", "string"]},
    "relabelings": {"type": "array", "items": RELABEL_CONFIG},
    "metricRelabelings": {"type": "array", "items": RELABEL_CONFIG},
    **{k: {"type": "object"} for k in ("authorization", "basicAuth", "bearerTokenSecret", "oauth2", "tlsConfig",
                                       "proxyConnectHeader")},
    **{k: {"type": "boolean"} for k in ("enableHttp2", "followRedirects", "proxyFromEnvironment")},
    **{k: {"type": "string"} for k in ("noProxy", "proxyUrl")}}
MONITOR_SPEC = {  # PodMonitorSpec / ServiceMonitorSpec: the fields both have
    "selector": LABEL_SELECTOR, "jobLabel": {"type": "string"},
    "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
        "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
    "podTargetLabels": {"type": "array", "items": {"type": "string"}},
    **{k: {"type": "integer", "minimum": 0} for k in ("sampleLimit", "targetLimit", "labelLimit",
                                                      "labelNameLengthLimit", "labelValueLengthLimit",
                                                      "keepDroppedTargets")},
    **{k: {"type": "string"} for k in ("bodySizeLimit", "scrapeClass", "fallbackScrapeProtocol",
                                       "selectorMechanism")},
    "scrapeProtocols": {"type": "array", "items": {"type": "string"}}, "attachMetadata": {"type": "object"}}


def _monitor_schema(kind: str, endpoints: str, extra_spec: dict, extra_endpoint: dict) -> dict:
    endpoint = {"type": "object", "additionalProperties": False, "properties": {**SCRAPE_ENDPOINT, **extra_endpoint}}
    return {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {
                "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": kind},
                "metadata": {"type": "object", "required": ["name"],
                             "properties": {"name": {"type": "string"}, "labels": STRING_MAP}},
                "spec": {"type": "object", "additionalProperties": False, "required": ["selector", endpoints],
                         "properties": {**MONITOR_SPEC, **extra_spec,
                                        endpoints: {"type": "array", "minItems": 1, "items": endpoint}}}}}


CRD_SCHEMAS = {
    "PodMonitor": _monitor_schema("PodMonitor", "podMetricsEndpoints", {},
                                  {"portNumber": {"type": "integer", "minimum": 1, "maximum": 65535}}),
    "ServiceMonitor": _monitor_schema("ServiceMonitor", "endpoints",
                                      {"targetLabels": {"type": "array", "items": {"type": "string"}},
                                       "serviceDiscoveryRole": {"enum": ["Endpoints", "EndpointSlice"]}},
                                      {"bearerTokenFile": {"type": "string"}}),
}
RULE = {"type": "object", "additionalProperties": False, "required": ["expr"],  # PrometheusRule's Rule
        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
        "properties": {"alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                       "record": {"type": "string", "pattern": "^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
                       "expr": {"type": "string", "minLength": 1}, "for": DURATION, "keep_firing_for": DURATION,
                       "labels": STRING_MAP, "annotations": STRING_MAP}}
PROMETHEUS_RULE = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                                    "labels": STRING_MAP}},
        "spec": {"type": "object", "additionalProperties": False, "required": ["groups"], "properties": {
            "groups": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False, "required": ["name", "rules"],
                "properties": {"name": {"type": "string", "minLength": 1}, "interval": DURATION,
                               "limit": {"type": "integer"}, "partial_response_strategy": {"type": "string"},
                               "rules": {"type": "array", "minItems": 1, "items": RULE}}}}}}}}
# Prometheus' own rules for a relabel config (config.go: relabel.Config.Validate).
NEEDS_TARGET_LABEL = {"replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal"}


def validate_monitor(obj: dict) -> None:
    jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
    endpoints = obj["spec"].get("podMetricsEndpoints") or obj["spec"]["endpoints"]
    for ep in endpoints:
        assert ("port" in ep) != ("portNumber" in ep), f"{obj['metadata']['name']}: name exactly one port"
        for rule in ep.get("relabelings", []) + ep.get("metricRelabelings", []):
            action = rule.get("action", "replace").lower()
            assert action not in NEEDS_TARGET_LABEL or "targetLabel" in rule, f"{action} needs targetLabel: {rule}"
            assert action not in ("keep", "drop") or rule.get("sourceLabels"), f"{action} needs sourceLabels"
            re.compile(rule.get("regex", "(.*)"))


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
def validate(obj: dict) -> None:
    import kubernetes_validate

    if obj["kind"] == "ScaledObject":
        validate_scaled_object(obj)
    elif obj["kind"] == "PrometheusRule":  # its expressions: tests/test_dashboard.py (promtool)
        jsonschema.validate(obj, PROMETHEUS_RULE)
    elif obj["kind"] in CRD_SCHEMAS:
        validate_monitor(obj)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_every_object_validates(overlay: tuple[str, list[dict]]) -> None:
    name, objs = overlay
    for obj in objs:
        validate(obj)
    rbac = {"direct": ["Role"] * 3 + ["RoleBinding"] * 3}.get(name, [])  # scale, leases, events
    scalers = {"keda": ["ScaledObject"] * 2, "keda-external": ["ScaledObject"] * 2,
               "hpa": ["HorizontalPodAutoscaler"] * 2}.get(name, [])
    dashboards = ["ConfigMap"] * len(DASHBOARDS)
    assert sorted(o["kind"] for o in objs) == sorted(["ConfigMap", *dashboards, "Deployment", "Service",
                                                      "ServiceAccount", "ServiceMonitor", "PrometheusRule",
                                                      *rbac, *scalers])
    assert {o["metadata"].get("namespace") for o in objs} == {NAMESPACE}


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
    monitor = yaml.safe_load((DEPLOY / "engines" / "vllm-podmonitor.yaml").read_text())
    ep = monitor["spec"]["podMetricsEndpoints"][0]
    for mistake, error in [({"relabelings": [{"source_labels": ["a"]}]}, jsonschema.ValidationError),
                           ({"relabelings": [{"action": "replace", "sourceLabels": ["a"]}]}, AssertionError),
                           ({"interval": "15 seconds"}, jsonschema.ValidationError),
                           ({"port": "http"}, AssertionError)]:  # both port and portNumber
        with pytest.raises(error):
            validate_monitor({**monitor, "spec": {**monitor["spec"], "podMetricsEndpoints": [{**ep, **mistake}]}})
    with pytest.raises(jsonschema.ValidationError):
        validate_monitor({**monitor, "apiVersion": "monitoring.coreos.com/v1alpha1"})


def test_deployment_runs_the_policy_and_serves_the_ports(overlay: tuple[str, list[dict]], tmp_path: Path) -> None:
    name, objs = overlay
    (deploy,) = by_kind(objs, "Deployment")
    (svc,) = by_kind(objs, "Service")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["args"]  # after the image's entrypoint `planner` (tests/test_dockerfile.py)
    assert "command" not in container
    assert argv[:3] == ["run", "--policy", "/etc/planner/policy.yaml"]
    assert ("--leader-elect" in argv) is (name == "direct")
    policy_cm = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("planner-policy"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["policy"]["configMap"]["name"] == policy_cm["metadata"]["name"]  # kustomize rewrote the hash
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["policy"] == "/etc/planner"
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


def test_dashboard_config_maps(overlay: tuple[str, list[dict]]) -> None:
    """One ConfigMap per generated dashboard, each labelled for the Grafana sidecar."""
    _, objs = overlay
    maps = {name: cm for cm in by_kind(objs, "ConfigMap") if cm["metadata"]["name"].startswith("planner-dashboard")
            for name in cm["data"]}
    assert set(maps) == {p.name for p in DASHBOARDS}
    for name, cm in maps.items():
        assert cm["metadata"]["name"].startswith("planner-dashboard")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(cm["data"][name]) == json.loads((REPO / "dashboards" / name).read_text())
        assert len(json.dumps(cm).encode()) < 256 * 1024  # fits the client-side apply annotation, let alone 1 MiB


def test_prometheus_rule_is_the_generated_one(overlay: tuple[str, list[dict]]) -> None:
    from planner.dashboards.alerts import prometheus_rule

    _, objs = overlay
    (rule,) = by_kind(objs, "PrometheusRule")
    assert rule["spec"] == prometheus_rule()["spec"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # the chart's default ruleSelector


def test_base_is_namespace_agnostic() -> None:
    objs = render(DEPLOY / "base")
    assert all("namespace" not in o["metadata"] for o in objs)


ACTUATOR_DELIMITER = "\n  kind: "  # components/actuator-*: the value after it is replaced


def test_one_policy_each_overlay_changes_only_the_actuator(overlay: tuple[str, list[dict]]) -> None:
    name, objs = overlay
    text = (DEPLOY / "base" / "policy.yaml").read_text()
    assert text.count(ACTUATOR_DELIMITER) == 1, "the replacement needs exactly one block-style 'kind:' at indent 2"
    base = yaml.safe_load(text)
    assert list(base)[-1] == "actuator" and base["actuator"] == {"kind": "dry-run"}
    assert not list((DEPLOY / "overlays" / name).glob("policy*.yaml")), "no per-overlay policy copies"
    cm = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("planner-policy"))
    rendered = yaml.safe_load(cm["data"]["policy.yaml"])
    assert rendered.pop("actuator") == {"kind": OVERLAYS[name]}
    base.pop("actuator")
    assert rendered == base
    (deploy,) = by_kind(objs, "Deployment")
    assert deploy["metadata"]["annotations"]["planner/actuator"] == OVERLAYS[name]


def test_namespace_is_set_once(tmp_path: Path) -> None:
    """Changing components/namespace moves every object, binding subject and KEDA address of every overlay."""
    copy = tmp_path / "repo"
    shutil.copytree(DEPLOY, copy / "deploy")
    shutil.copytree(REPO / "dashboards", copy / "dashboards")
    ns_file = copy / "deploy" / "components" / "namespace" / "kustomization.yaml"
    ns = yaml.safe_load(ns_file.read_text())
    assert ns["namespace"] == NAMESPACE
    ns_file.write_text(ns_file.read_text().replace(f"namespace: {NAMESPACE}", "namespace: team-a"))
    setters = [p for p in DEPLOY.rglob("kustomization.yaml") if "namespace" in yaml.safe_load(p.read_text())]
    assert setters == [DEPLOY / "components" / "namespace" / "kustomization.yaml"]
    for name in OVERLAYS:
        objs = render(copy / "deploy" / "overlays" / name)
        assert {o["metadata"]["namespace"] for o in objs} == {"team-a"}
        for binding in by_kind(objs, "RoleBinding"):
            assert {s["namespace"] for s in binding["subjects"]} == {"team-a"}
        for so in by_kind(objs, "ScaledObject"):
            (trigger,) = so["spec"]["triggers"]
            address = trigger["metadata"].get("url") or trigger["metadata"]["scalerAddress"]
            assert "planner.team-a.svc.cluster.local:" in address, address


def test_policy_targets_live_in_the_overlays_namespace(overlay: tuple[str, list[dict]], tmp_path: Path) -> None:
    _, objs = overlay
    policy = policy_of(objs, tmp_path)
    assert {policy.pool(p).target.namespace for p in policy.pool_names()} == {NAMESPACE}


# ----------------------------------------------------------------------------------------- Prometheus
ENGINE_MONITORS = sorted((DEPLOY / "engines").glob("*-podmonitor.yaml"))


def test_service_monitor_scrapes_the_planners_metrics(overlay: tuple[str, list[dict]]) -> None:
    from prometheus_client import CollectorRegistry

    from planner.service.app import create_app

    _, objs = overlay
    (sm,) = by_kind(objs, "ServiceMonitor")
    (svc,) = by_kind(objs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert "namespaceSelector" not in sm["spec"]  # its own namespace: the Service's
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    routes = {r.path for r in create_app(CollectorRegistry(), lambda: None).routes}  # type: ignore[attr-defined]
    assert endpoint["path"] in routes and endpoint["path"] == "/metrics"


@pytest.mark.parametrize("path", ENGINE_MONITORS, ids=lambda p: p.stem)
def test_engine_pod_monitors_validate(path: Path) -> None:
    (monitor,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    validate(monitor)
    planner_sm = yaml.safe_load((DEPLOY / "components" / "monitoring" / "servicemonitor.yaml").read_text())
    assert monitor["metadata"]["labels"] == planner_sm["metadata"]["labels"]  # one Prometheus selects both
    assert "namespace" not in monitor["metadata"]  # applied with -n into the engines' namespace


def relabel_configs(endpoint: dict) -> list[dict]:
    """A PodMonitor endpoint's relabelings as Prometheus relabel_configs (what prometheus-operator writes)."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return [{keys.get(k, k): (v.lower() if k == "action" else v) for k, v in rule.items()}
            for rule in endpoint.get("relabelings", [])]


def pod(**labels: str) -> dict[str, str]:
    """Target labels Kubernetes pod discovery would give a pod with these labels (names sanitised)."""
    return {"__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in labels.items()}


MODEL = "Qwen/Qwen3-32B"
# (engine monitor, pod labels, model the engine serves, the pool it must land in; None: not scraped)
ENGINE_PODS = [
    ("vllm", pod(**{"llm-d.ai/role": "prefill"}), MODEL, "prefill"),
    ("vllm", pod(**{"llm-d.ai/role": "prefill"}), MODEL, "prefill"),
    ("vllm", pod(**{"llm-d.ai/role": "decode"}), MODEL, "decode"),
    ("vllm", pod(**{"llm-d.ai/role": "decode"}), "another/model", "decode"),
    ("vllm", pod(**{"llm-d.ai/role": "both"}), MODEL, "aggregated"),
    ("vllm", pod(**{"llm-d.ai/role": "router"}), MODEL, None),
    ("sglang", pod(**{"llm-d.ai/role": "decode"}), MODEL, "decode"),
    ("sglang", pod(**{"llm-d.ai/role": "prefill-decode"}), MODEL, "aggregated"),
    ("dynamo", pod(**{"nvidia.com/dynamo-component-type": "prefill"}), MODEL, "prefill"),
    ("dynamo", pod(**{"nvidia.com/dynamo-component-type": "worker",
                      "nvidia.com/dynamo-sub-component-type": "decode"}), MODEL, "decode"),
    ("dynamo", pod(**{"nvidia.com/dynamo-component-type": "worker"}), MODEL, "aggregated"),
    ("dynamo", pod(**{"nvidia.com/dynamo-component-type": "frontend"}), MODEL, None),
]


def test_engine_relabelling_gives_the_pools_the_policy_selects(tmp_path: Path) -> None:
    """A real Prometheus applies each engine PodMonitor's relabelings to pods as discovery labels them and
    scrapes vLLM-format engines; the shipped policy's selectors must then find each pool's engines."""
    from prometheus_client import generate_latest

    from planner.emulator.vllm_metrics import VllmMetrics
    from planner.testing.local_prometheus import LocalPrometheus
    from tests.support.prom_fixtures import FakeHTTP, require_prometheus

    monitors = {p.stem.removesuffix("-podmonitor"): yaml.safe_load(p.read_text()) for p in ENGINE_MONITORS}
    assert sorted(monitors) == ["dynamo", "sglang", "vllm"]
    servers = []
    jobs: dict[str, list[dict]] = {name: [] for name in monitors}
    for engine, labels, model, _ in ENGINE_PODS:  # each engine pod serves vLLM's exposition text
        servers.append(FakeHTTP(text=generate_latest(VllmMetrics(model, 40960).registry).decode()))
        jobs[engine].append({"targets": [f"127.0.0.1:{servers[-1].port}"], "labels": labels})

    class EnginePrometheus(LocalPrometheus):
        def _config(self) -> dict:
            return {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [
                {"job_name": name, "static_configs": jobs[name],
                 "relabel_configs": relabel_configs(monitors[name]["spec"]["podMetricsEndpoints"][0])}
                for name in monitors]}

    prom = EnginePrometheus([], binary=require_prometheus(), workdir=tmp_path / "prom").start()
    try:
        import httpx

        def query(promql: str) -> dict[str, int]:
            result = httpx.get(f"{prom.url}/api/v1/query", params={"query": promql}, timeout=5).json()
            return {r["metric"].get("pool", ""): int(float(r["value"][1])) for r in result["data"]["result"]}

        want: dict[str, dict[str, int]] = {name: {} for name in monitors}
        for engine, _, _, pool in ENGINE_PODS:
            if pool is not None:
                want[engine][pool] = want[engine].get(pool, 0) + 1
        deadline = time.monotonic() + 30
        while True:
            got = {name: query(f'count by (pool) (vllm:num_requests_running{{job="{name}"}})') for name in monitors}
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert got == want, httpx.get(f"{prom.url}/api/v1/targets?state=any").text[:3000]
        policy = parse_policy(yaml.safe_load((DEPLOY / "base" / "policy.yaml").read_text()), "policy.yaml")
        for pool, selector in policy.metrics.selectors.items():
            expected = sum(1 for e, _, model, p in ENGINE_PODS if e == "vllm" and p == pool and model == MODEL)
            assert expected > 0
            assert query(f'count(vllm:num_requests_running{{job="vllm"}} and vllm:num_requests_running{selector})'
                         ) == {"": expected}, pool
    finally:
        prom.stop()
        for server in servers:
            server.stop()
