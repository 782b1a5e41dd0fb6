"""What the chosen actuator needs beside the engines, and the kustomization that lists it all.

The same objects deploy/overlays/ ships for its example pools (INTEGRATION.md §2.5: AverageValue target 1,
tolerance 0, no stabilisation), made for the rendered pools:
- keda: a ScaledObject per pool whose metrics-api trigger reads the planner's ``/v1/desired?pool=``;
- hpa: an autoscaling/v2 HPA per pool on the External metric ``planner_desired_replicas``
  (prometheus-adapter rule: deploy/overlays/hpa/prometheus-adapter-values.yaml);
- kubernetes: a Role letting the planner's ServiceAccount get/update exactly these targets' ``/scale``
  (and list/patch pods where a target is a Deployment: the pod-deletion-cost mark of a scale-down);
- dry-run: nothing (advisory).
"""

from __future__ import annotations

from typing import Any

import yaml

from planner.actuators.targets import MARKED_KINDS, SCALABLE_KINDS
from planner.policy_file import PolicyFile
from planner.types import Pool

PLANNER_SERVICE = "planner"  # deploy/base/service.yaml; the planner runs in the engines' namespace
FOLLOW_EXACTLY = {
    direction: {"stabilizationWindowSeconds": 0, "tolerance": "0", "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": 1000, "periodSeconds": 15}]}
    for direction in ("scaleUp", "scaleDown")}


def _ref(policy: PolicyFile, pool: Pool) -> dict[str, str]:
    target = policy.pool(pool).target
    assert target is not None
    return {"apiVersion": target.api_version, "kind": target.kind, "name": target.name}


def scaled_object(policy: PolicyFile, pool: Pool) -> dict[str, Any]:
    spec = policy.pool(pool)
    target = spec.target
    assert target is not None
    url = f"http://{PLANNER_SERVICE}.{target.namespace}.svc.cluster.local:8080/v1/desired?pool={pool.value}"
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": target.name, "namespace": target.namespace},
            "spec": {"scaleTargetRef": _ref(policy, pool), "pollingInterval": 15,
                     "minReplicaCount": spec.min_replicas, "maxReplicaCount": spec.max_replicas,
                     # planner unreachable or no decision yet 3 times: keep what runs, never scale to 0
                     "fallback": {"failureThreshold": 3, "replicas": spec.min_replicas,
                                  "behavior": "currentReplicasIfHigher"},
                     "advanced": {"horizontalPodAutoscalerConfig": {"behavior": FOLLOW_EXACTLY}},
                     "triggers": [{"type": "metrics-api", "metricType": "AverageValue",
                                   "metadata": {"url": url, "format": "json", "valueLocation": "desired",
                                                "targetValue": "1", "activationTargetValue": "0"}}]}}


def hpa(policy: PolicyFile, pool: Pool) -> dict[str, Any]:
    spec = policy.pool(pool)
    target = spec.target
    assert target is not None
    metric = {"name": "planner_desired_replicas",
              "selector": {"matchLabels": {"policy": policy.name, "pool": pool.value}}}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": target.name, "namespace": target.namespace},
            "spec": {"scaleTargetRef": _ref(policy, pool), "minReplicas": max(1, spec.min_replicas),
                     "maxReplicas": spec.max_replicas,
                     "metrics": [{"type": "External", "external": {
                         "metric": metric, "target": {"type": "AverageValue", "averageValue": "1"}}}],
                     "behavior": FOLLOW_EXACTLY}}


def scale_role(policy: PolicyFile) -> list[dict[str, Any]]:
    """What planner/actuators/kubernetes.py calls (read/replace of /scale) on these targets only, and on the
    pods of Deployment targets (list, patch: planner/actuators/deletion_cost.py)."""
    rules: dict[tuple[str, str], list[str]] = {}
    namespace = ""
    marks = False
    for pool in policy.pool_names():
        target = policy.pool(pool).target
        assert target is not None
        marks = marks or target.kind in MARKED_KINDS
        group, plural = SCALABLE_KINDS[target.kind]
        rules.setdefault((group, f"{plural}/scale"), []).append(target.name)
        namespace = target.namespace
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "planner-scale", "namespace": namespace},
            "rules": [*({"apiGroups": [g], "resources": [r], "resourceNames": names, "verbs": ["get", "update"]}
                        for (g, r), names in rules.items()),
                      # a scale-down marks the pod it removes (pod-deletion-cost): list and patch, not nameable
                      *([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}] if marks else [])]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "planner-scale", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "planner-scale"},
               "subjects": [{"kind": "ServiceAccount", "name": "planner", "namespace": namespace}]}
    return [role, binding]


def actuator_objects(policy: PolicyFile) -> dict[str, list[dict[str, Any]]]:
    kind = policy.actuator.kind
    if kind == "keda":
        return {"scaledobjects.yaml": [scaled_object(policy, p) for p in policy.pool_names()]}
    if kind == "hpa":
        return {"hpas.yaml": [hpa(policy, p) for p in policy.pool_names()]}
    if kind == "kubernetes":
        return {"planner-rbac.yaml": scale_role(policy)}
    return {}


def kustomization(namespace: str, files: list[str]) -> dict[str, Any]:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
            "resources": files}


class _NoAliases(yaml.SafeDumper):
    """Manifests are read by people: repeat a shared value rather than write a YAML anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_NoAliases, sort_keys=False)


def dump_all(objects: list[dict[str, Any]], header: str = "") -> str:
    return header + "---\n".join(dump(o) for o in objects)
