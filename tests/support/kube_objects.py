"""Objects for tests on the real API server (tests/support/kube_fixtures.py): Deployments to scale, rendered
manifests moved into a test's own namespace, and the audit log read as (apiGroup, resource, verb)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from planner.testing.kube_apiserver import KubeAPIServer

RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding")


def deployment(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "engine", "image": "engine:test"}]}}}}


def in_namespace(objs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """``objs`` moved into ``namespace`` (their own and their RoleBindings' ServiceAccount subjects)."""
    out = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        if "namespace" in obj.get("metadata", {}):
            obj["metadata"]["namespace"] = namespace
        for subject in obj.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        out.append(obj)
    return out


def apply(kube: KubeAPIServer, objs: list[dict[str, Any]], *extra: str) -> str:
    return kube.kubectl("apply", "--server-side", "-f", "-", *extra,
                        input_text=yaml.safe_dump_all(objs)).stdout


def used(kube: KubeAPIServer, user: str, namespace: str | None = None) -> set[tuple[str, str, str, str]]:
    """(apiGroup, resource[/subresource], verb, name) of every request ``user`` made that was allowed."""
    out = set()
    for e in kube.audit_events(user):
        ref = e.get("objectRef") or {}
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        if not 200 <= int(e.get("responseStatus", {}).get("code", 0)) < 300:
            continue
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.add((ref.get("apiGroup", ""), resource, e["verb"], ref.get("name", "")))
    return out


def granted(roles: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(apiGroup, resource, verb, name or "") every rule of ``roles`` grants."""
    out = set()
    for role in roles:
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups", [""]):
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            out.add((group, resource, verb, name))
    return out


def default_service_account(namespace: str) -> dict[str, Any]:
    """What kube-controller-manager would create in every namespace (none runs here); a Pod needs it."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}}


def pod(namespace: str, name: str, labels: dict[str, str], port: int = 8000) -> dict[str, Any]:
    """A Pod as a ReplicaSet would make it (no kubelet runs here: it stays Pending until ``set_ready``).
    The namespace needs ``default_service_account`` first."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "engine", "image": "engine:test",
                                     "ports": [{"name": "http", "containerPort": port}]}]}}


def set_ready(kube: KubeAPIServer, namespace: str, name: str, ip: str | None = "127.0.0.1") -> None:
    """What the kubelet reports of a running pod that passes its readiness probe (the status subresource);
    ``ip`` None: no pod IP (nothing to ask for its load)."""
    from kubernetes import client

    now = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}
    if ip is not None:
        status |= {"podIP": ip, "podIPs": [{"ip": ip}]}
    client.CoreV1Api(kube.api_client()).patch_namespaced_pod_status(name, namespace, {"status": status})


def annotations(kube: KubeAPIServer, namespace: str) -> dict[str, dict[str, str]]:
    """Pod name -> its annotations."""
    items = yaml.safe_load(kube.kubectl("-n", namespace, "get", "pods", "-o", "yaml").stdout)["items"]
    return {p["metadata"]["name"]: p["metadata"].get("annotations") or {} for p in items}
