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
