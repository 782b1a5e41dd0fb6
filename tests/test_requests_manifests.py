"""Rendered manifests: `kubectl kustomize` builds them, every object validates, and they agree with the policy.

Built-in kinds are checked against the Kubernetes 1.34 schemas of kubernetes-validate (strict), ScaledObjects
with tests/test_deploy.py's schema. LeaderWorkerSet and DynamoGraphDeployment are CRDs whose schemas are not
available offline: the closed schemas below are written from their API types (leaderworkerset.x-k8s.io/v1
LeaderWorkerSetSpec; nvidia.com/v1alpha1 DynamoGraphDeployment as in INTEGRATION.md §4.2 and Dynamo's
examples), and the pod templates and containers inside them are validated as the built-in types they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from planner.policy_file import load_policy
from planner.requests import artifacts, pipeline
from planner.requests.checks import check
from planner.requests.drain_hook import DRAIN_S, ENDPOINTS_DELAY_S, HOOK
from planner.requests.spec import parse_spec
from planner.sources.dialects import get_dialect
from tests.support.requests_support import spec_data
from tests.test_deploy import K8S_VERSION, by_kind, render, validate

OBJ = {"type": "object"}
META = {"type": "object", "required": ["name", "namespace"], "properties": {"name": {"type": "string"},
                                                                            "namespace": {"type": "string"}}}
LWS = {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
       "properties": {
           "apiVersion": {"const": "leaderworkerset.x-k8s.io/v1"}, "kind": {"const": "LeaderWorkerSet"},
           "metadata": META,
           "spec": {"type": "object", "additionalProperties": False, "required": ["leaderWorkerTemplate"],
                    "properties": {
                        "replicas": {"type": "integer", "minimum": 0},
                        "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                        "rolloutStrategy": OBJ, "networkConfig": OBJ,
                        "leaderWorkerTemplate": {
                            "type": "object", "additionalProperties": False, "required": ["workerTemplate"],
                            "properties": {"size": {"type": "integer", "minimum": 1},
                                           "restartPolicy": {"enum": ["RecreateGroupOnPodRestart", "None",
                                                                      "Default"]},
                                           "leaderTemplate": OBJ, "workerTemplate": OBJ, "subGroupPolicy": OBJ,
                                           "volumeClaimTemplates": {"type": "array"}}}}}}}
QUANTITIES = {"type": "object", "additionalProperties": False,
              "properties": {k: {"type": "string"} for k in ("cpu", "memory", "gpu")} | {"custom": OBJ}}
DGD_SERVICE = {"type": "object", "additionalProperties": False, "required": ["componentType"], "properties": {
    "componentType": {"enum": ["frontend", "worker", "planner", "main", "epp"]},
    "subComponentType": {"enum": ["prefill", "decode"]}, "replicas": {"type": "integer", "minimum": 0},
    "envFromSecret": {"type": "string"}, "dynamoNamespace": {"type": "string"},
    "resources": {"type": "object", "additionalProperties": False,
                  "properties": {"requests": QUANTITIES, "limits": QUANTITIES}},
    "multinode": {"type": "object", "additionalProperties": False, "required": ["nodeCount"],
                  "properties": {"nodeCount": {"type": "integer", "minimum": 1}}},
    "scalingAdapter": {"type": "object", "additionalProperties": False, "properties": {"enabled": {"type": "boolean"}}},
    "extraPodSpec": {"type": "object", "properties": {"mainContainer": OBJ}}}}
DGD = {"type": "object", "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
       "properties": {"apiVersion": {"const": "nvidia.com/v1alpha1"}, "kind": {"const": "DynamoGraphDeployment"},
                      "metadata": META,
                      "spec": {"type": "object", "additionalProperties": False, "required": ["services"],
                               "properties": {"backendFramework": {"enum": ["sglang", "vllm", "trtllm"]},
                                              "services": {"type": "object", "additionalProperties": DGD_SERVICE}}}}}


def _as_deployment(template: dict[str, Any]) -> dict[str, Any]:
    labels = template.get("metadata", {}).get("labels") or {"app": "x"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {"matchLabels": labels}, "template": template}}


def validate_any(obj: dict[str, Any]) -> None:
    import kubernetes_validate

    if obj["kind"] == "LeaderWorkerSet":
        jsonschema.validate(obj, LWS)
        for key in ("leaderTemplate", "workerTemplate"):
            if key in obj["spec"]["leaderWorkerTemplate"]:
                kubernetes_validate.validate(_as_deployment(obj["spec"]["leaderWorkerTemplate"][key]), K8S_VERSION,
                                             strict=True)
    elif obj["kind"] == "DynamoGraphDeployment":
        jsonschema.validate(obj, DGD)
        for service in obj["spec"]["services"].values():
            container = {"name": "main", **service["extraPodSpec"]["mainContainer"]}
            kubernetes_validate.validate(_as_deployment({"metadata": {"labels": {"a": "b"}},
                                                         "spec": {"containers": [container]}}), K8S_VERSION,
                                         strict=True)
    else:
        validate(obj)  # built-in kinds strictly, ScaledObjects with test_deploy's schema


CASES = {  # id -> spec overrides
    "deployments-vllm-keda": {},
    "deployments-sglang-hpa": {"engine": "sglang", "actuator": "hpa"},
    "deployments-trtllm-aggregated-dry-run": {"engine": "trtllm", "mode": "aggregated", "actuator": "dry-run"},
    "deployments-vllm-kubernetes": {"actuator": "kubernetes", "namespace": "llm", "name": "chat"},
    "lws-vllm-multinode": {"output": "lws", "tp": [8], "hardware.gpus_per_node": 4},
    "lws-sglang-multinode-hpa": {"output": "lws", "engine": "sglang", "tp": [8], "hardware.gpus_per_node": 2,
                                 "actuator": "hpa"},
    "lws-vllm-one-node": {"output": "lws"},
    "dynamo-graph-vllm": {"output": "dynamo-graph", "engine": "dynamo"},
    "dynamo-graph-sglang-hpa": {"output": "dynamo-graph", "engine": "sglang", "actuator": "hpa"},
    "dynamo-graph-trtllm": {"output": "dynamo-graph", "engine": "trtllm"},
    "dynamo-graph-multinode": {"output": "dynamo-graph", "engine": "vllm", "tp": [8], "hardware.gpus_per_node": 4},
    "dynamo-graph-aggregated": {"output": "dynamo-graph", "engine": "vllm", "mode": "aggregated"},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, Path]:
    out = tmp_path_factory.mktemp(request.param)
    outcome = pipeline.run(check(parse_spec(spec_data(**CASES[request.param]))), _Quiet())
    artifacts.commit(out, outcome.rendered.files)
    return request.param, outcome, out


class _Quiet:
    def step(self, *_: Any) -> None:
        pass

    def progress(self, *_: Any) -> None:
        pass


def test_kustomize_builds_and_every_object_validates(rendered: tuple[str, Any, Path]) -> None:
    name, outcome, out = rendered
    objs = render(out / "manifests")
    assert len(objs) == len(outcome.rendered.objects)
    for obj in objs:
        validate_any(obj)
    namespaces = {o["metadata"].get("namespace") for o in objs}
    assert namespaces == {CASES[name].get("namespace", "default")}


def _args_of(obj: dict[str, Any]) -> list[list[str]]:
    """Each engine container's command line (command + args) in an object."""
    if obj["kind"] == "DynamoGraphDeployment":
        return [[*s["extraPodSpec"]["mainContainer"].get("command", []), *s["extraPodSpec"]["mainContainer"].get(
            "args", [])] for s in obj["spec"]["services"].values() if s["componentType"] == "worker"]
    templates = ([obj["spec"]["template"]] if obj["kind"] == "Deployment" else
                 [obj["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or
                  obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]])
    return [[*c.get("command", []), *c.get("args", [])] for t in templates for c in t["spec"]["containers"]]


def _tp_in(argv: list[str]) -> int:
    text = " ".join(argv)
    for flag in ("--tensor-parallel-size", "--tp_size", "--tp"):
        if f"{flag} " in text:
            return int(text.split(f"{flag} ", 1)[1].split()[0])
    raise AssertionError(f"no TP flag in {argv}")


def test_engines_carry_the_chosen_tp_gpus_and_replicas(rendered: tuple[str, Any, Path]) -> None:
    _, outcome, _ = rendered
    engines = [o for o in outcome.rendered.objects if o["kind"] in ("Deployment", "LeaderWorkerSet",
                                                                     "DynamoGraphDeployment")]
    tps = sorted(_tp_in(a) for o in engines for a in _args_of(o))
    assert tps == sorted(s.tp for s in outcome.result.pools.values())
    for obj in engines:
        if obj["kind"] == "DynamoGraphDeployment":
            for svc in obj["spec"]["services"].values():
                if svc["componentType"] != "worker":
                    continue
                pool = svc.get("subComponentType", "aggregated")
                stage = outcome.result.pools[pool]
                nodes = svc.get("multinode", {}).get("nodeCount", 1)
                assert int(svc["resources"]["limits"]["gpu"]) * nodes == stage.tp and svc["replicas"] == stage.replicas
            continue
        pool = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        stage = outcome.result.pools[pool]
        size = obj["spec"].get("leaderWorkerTemplate", {}).get("size", 1)
        t = obj["spec"].get("template") or obj["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or \
            obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        gpus = int(t["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        assert gpus * size == stage.tp and obj["spec"]["replicas"] == stage.replicas


def test_policy_targets_and_scalers_agree_with_the_objects(rendered: tuple[str, Any, Path]) -> None:
    _, outcome, out = rendered
    policy = load_policy(out / "policy.yaml")
    objs = outcome.rendered.objects
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    dgd = next((o for o in objs if o["kind"] == "DynamoGraphDeployment"), None)
    for pool in policy.pool_names():
        target = policy.pool(pool).target
        assert target is not None and target.namespace == objs[0]["metadata"]["namespace"]
        if dgd is not None:  # the operator names each adapter <dgd>-<service in lower case>
            service = target.name.removeprefix(dgd["metadata"]["name"] + "-")
            assert dgd["spec"]["services"][service]["scalingAdapter"]["enabled"] is (policy.actuator.kind != "dry-run")
        else:
            assert (target.kind, target.name) in names
        bounds = (policy.pool(pool).min_replicas, policy.pool(pool).max_replicas)
        assert bounds[0] <= outcome.result.pools[pool].replicas <= bounds[1]
        ref = {"apiVersion": target.api_version, "kind": target.kind, "name": target.name}
        for so in by_kind(objs, "ScaledObject"):
            if so["spec"]["scaleTargetRef"] == ref:
                assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == bounds
                assert so["spec"]["triggers"][0]["metadata"]["url"].endswith(f"/v1/desired?pool={pool}")
        for hpa in by_kind(objs, "HorizontalPodAutoscaler"):
            if hpa["spec"]["scaleTargetRef"] == ref:
                assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == bounds
                assert hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"] == {
                    "policy": policy.name, "pool": pool}
    scalers = len(by_kind(objs, "ScaledObject")) + len(by_kind(objs, "HorizontalPodAutoscaler"))
    assert scalers == (len(policy.pool_names()) if policy.actuator.kind in ("keda", "hpa") else 0)
    roles = by_kind(objs, "Role")
    assert bool(roles) is (policy.actuator.kind == "kubernetes")
    for role in roles:  # exactly the targets' /scale, as deploy/overlays/direct grants
        scale_rules = [r for r in role["rules"] if r["resources"][0].endswith("/scale")]
        assert sorted(n for r in scale_rules for n in r["resourceNames"]) == sorted(
            policy.pool(p).target.name for p in policy.pool_names())  # type: ignore[union-attr]
        # and, for Deployments, list/patch on pods: a scale-down marks the pod it removes (pod-deletion-cost)
        pod_rules = [r for r in role["rules"] if r["resources"] == ["pods"]]
        deployments = any(policy.pool(p).target.kind == "Deployment" for p in policy.pool_names())  # type: ignore[union-attr]
        assert pod_rules == ([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}]
                             if deployments else [])


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Deployment":
        return [obj["spec"]["template"]["spec"]]
    return [t["spec"] for k, t in obj["spec"]["leaderWorkerTemplate"].items() if k.endswith("Template")]


def test_every_engine_pod_drains_before_sigterm_within_its_grace_period(rendered: tuple[str, Any, Path]) -> None:
    """A preStop hook that waits for the engine's requests in flight (an LWS worker: its leader's), and a
    terminationGracePeriodSeconds that covers it; Dynamo's workers get the time and drain themselves."""
    _, outcome, out = rendered
    gauges = get_dialect(load_policy(out / "policy.yaml").metrics.dialect).in_system_gauges  # the planner's own
    for obj in outcome.rendered.objects:
        if obj["kind"] == "DynamoGraphDeployment":
            for svc in obj["spec"]["services"].values():
                if svc["componentType"] != "worker":
                    continue
                pod = svc["extraPodSpec"]
                env = {e["name"]: e["value"] for e in pod["mainContainer"]["env"]}
                assert int(env["DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT"]) >= DRAIN_S
                assert pod["terminationGracePeriodSeconds"] > int(env["DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT"])
                assert "lifecycle" not in pod["mainContainer"]  # a preStop would delay leaving discovery
            continue
        if obj["kind"] not in ("Deployment", "LeaderWorkerSet"):
            continue
        for spec in _pod_specs(obj):
            assert spec["terminationGracePeriodSeconds"] >= DRAIN_S + ENDPOINTS_DELAY_S
            for c in spec["containers"]:
                argv = c["lifecycle"]["preStop"]["exec"]["command"]
                assert argv[:3] == ["python3", "-c", HOOK] and float(argv[4]) == DRAIN_S
                port = int(argv[3])
                serving = "ports" in c
                assert argv[6] == ("" if serving else "LWS_LEADER_ADDRESS")
                if serving:
                    assert port == c["ports"][0]["containerPort"]
                assert tuple(argv[7:]) == gauges


def test_validation_catches_mistakes_in_the_crd_kinds() -> None:
    outcome = pipeline.run(check(parse_spec(spec_data(**CASES["lws-vllm-multinode"]))), _Quiet())
    (lws,) = [o for o in outcome.rendered.objects if o["kind"] == "LeaderWorkerSet"][:1]
    broken = yaml.safe_load(yaml.safe_dump(lws))
    del broken["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    with pytest.raises(jsonschema.ValidationError):
        validate_any(broken)
    broken = yaml.safe_load(yaml.safe_dump(lws))
    broken["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["gpus"] = 8
    with pytest.raises(Exception, match="gpus"):
        validate_any(broken)
    dgd = [o for o in pipeline.run(check(parse_spec(spec_data(output="dynamo-graph"))), _Quiet()).rendered.objects
           if o["kind"] == "DynamoGraphDeployment"][0]
    broken = yaml.safe_load(yaml.safe_dump(dgd))
    broken["spec"]["services"]["decode"]["componentType"] = "decoder"
    with pytest.raises(jsonschema.ValidationError):
        validate_any(broken)
