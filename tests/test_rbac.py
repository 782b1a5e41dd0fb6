"""Least privilege: each overlay's Roles grant exactly what the planner's code calls, nothing more.

The required permissions are derived from the code, not from a hand-kept list:
- every kubernetes-client API method that planner/ references (an AST scan for ``<XxxApi>`` classes it
  uses and the method names it names) is mapped to its HTTP method and path, read from the client's own
  generated ``_<method>_serialize`` (``read_namespaced_deployment_scale`` -> GET
  ``/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale`` -> get ``deployments/scale`` in
  ``apps``); custom-object paths (``{group}``/``{plural}``) expand to the kinds planner/actuators/targets.py
  reaches through CustomObjectsApi;
- per overlay: the ``/scale`` permissions of each policy target's kind, scoped by ``resourceNames`` to the
  targets, when the planner acts (actuator kind kubernetes, no ``--dry-run``); Lease permissions only with
  ``--leader-elect`` (scoped to the lease name where Kubernetes allows: not for ``create``); Event
  ``create`` (which Kubernetes cannot scope by name) exactly where the planner scales the targets itself:
  it records an Event on each target it moves (planner/service/events.py), and nowhere else (an advisory,
  KEDA or HPA planner moves nothing and gets no token); anything else the code calls fails the test until
  this file learns how to scope it.
The rendered Roles (``kubectl kustomize``) bound to the planner's ServiceAccount must grant exactly that
set, and the pod mounts a token only when the set is not empty. A fake API server that enforces the
rendered Roles then runs the real actuator and leader elector against them.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.actuators.errors import ActuationError
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.targets import MARKED_KINDS, SCALABLE_KINDS, resolve_target, targets_from_policy
from planner.service.events import ScaleEvents
from planner.service.leader import LeaseElector
from tests.support.fake_kube import FakeKube, status_body
from tests.test_deploy import DEPLOY, OVERLAYS, REPO, by_kind, policy_of, render

Permission = tuple[str, str, str, str | None]  # (apiGroup, resource[/subresource], verb, resourceName|None)
# Kubernetes cannot restrict these verbs by resourceNames (the name is not in the request URL).
UNNAMEABLE_VERBS = frozenset({"create", "list", "watch", "deletecollection"})
PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/"
                  r"(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")


# ------------------------------------------------------------------------------------- from the code
def api_classes() -> dict[str, type]:
    from kubernetes import client

    return {n: getattr(client, n) for n in dir(client) if n.endswith("Api") and inspect.isclass(getattr(client, n))}


# The profile-request controller (planner/requests) runs as its own Deployment with its own Role
# (deploy/profile-requests); tests/test_requests_rbac.py derives that Role from its code the same way.
PROFILER_PACKAGE = "requests"
# The profiler's backends (planner/profiler: the kubernetes backend creates and deletes workers) run under
# `planner profile` or the profile-request controller, never in the control loop these overlays deploy.
PROFILER_BACKENDS = "profiler"
# Test helpers (planner/testing: the envtest-style API server makes ServiceAccounts and their tokens as admin).
TESTING_PACKAGE = "testing"


def referenced_api_methods(root: Path, skip: tuple[str, ...] = ()) -> set[tuple[str, str]]:
    """(API class, method) for every kubernetes-client API method the code under ``root`` names (``skip``:
    top-level folders of ``root`` left out)."""
    classes = api_classes()
    used: set[str] = set()
    names: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute):
                (used if node.attr in classes else names).add(node.attr)
            elif isinstance(node, ast.Name) and node.id in classes:
                used.add(node.id)
            elif isinstance(node, ast.ImportFrom):
                used.update(a.name for a in node.names if a.name in classes)
    return {(c, m) for c in used for m in names if hasattr(classes[c], f"_{m}_serialize")}


def endpoint(cls_name: str, method: str) -> tuple[str, str]:
    """(HTTP method, path template) of a client method, from the client's generated serializer."""
    source = inspect.getsource(getattr(api_classes()[cls_name], f"_{method}_serialize"))
    (http,) = re.findall(r"method='(\w+)'", source)
    (path,) = re.findall(r"resource_path='([^']+)'", source)
    return http, path


def permission(http: str, path: str) -> Permission:
    """What the API server authorizes for one request (path template or concrete path)."""
    m = PATH.match(path)
    if m is None:
        raise AssertionError(f"{http} {path}: not a namespaced resource; a namespaced Role cannot grant it")
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    named = m["name"] is not None
    verb = {"GET": "get" if named else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection"}[http]
    return ("" if m["core"] else m["group"], resource, verb, m["name"] if named else None)


def custom_kinds() -> list[tuple[str, str]]:
    """(group, plural) of the kinds the actuator reaches through CustomObjectsApi (targets.py)."""
    return [(g, p) for kind, (g, p) in SCALABLE_KINDS.items()
            if not resolve_target("p", f"{g}/v1", kind, "ns", "n", 0).builtin]


@cache
def code_permissions() -> frozenset[tuple[str, str, str]]:
    """(group, resource, verb) for every API call in planner/, custom-object templates expanded."""
    out: set[tuple[str, str, str]] = set()
    for cls_name, method in referenced_api_methods(REPO / "planner", skip=(PROFILER_PACKAGE, PROFILER_BACKENDS, TESTING_PACKAGE)):
        group, resource, verb, _ = permission(*endpoint(cls_name, method))
        if group == "{group}":
            out |= {(g, resource.replace("{plural}", p), verb) for g, p in custom_kinds()}
        else:
            out.add((group, resource, verb))
    return frozenset(out)


def lease_name(args: list[str]) -> str:
    if "--lease-name" in args:
        return args[args.index("--lease-name") + 1]
    import typer

    from planner.cli import app

    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    return next(p.default for p in run.params if p.name == "lease_name")


def required_permissions(objs: list[dict], tmp_path: Path) -> set[Permission]:
    policy = policy_of(objs, tmp_path)
    (container,) = by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    code = code_permissions()
    unknown = {p for p in code if not (p[1].endswith("/scale") or p[1] in ("leases", "events", "pods"))}
    assert not unknown, f"planner/ calls {sorted(unknown)}: teach tests/test_rbac.py how to scope them"
    required: set[Permission] = set()
    if policy.actuator.kind == "kubernetes" and "--dry-run" not in args:
        targets = targets_from_policy(policy, policy.actuator.kind).values()
        for t in targets:
            verbs = {v for g, r, v in code if (g, r) == (t.group, f"{t.plural}/scale")}
            assert verbs, f"no call in planner/ scales {t.describe()}"
            required |= {(t.group, f"{t.plural}/scale", v, t.name) for v in verbs}
        required |= {(g, r, v, None) for g, r, v in code if r == "events"}  # an Event on each scale
        if any(t.kind in MARKED_KINDS for t in targets):  # the pod a scale-down removes is marked first
            # Pods are named at run time: no resourceNames (list cannot have any).
            required |= {(g, r, v, None) for g, r, v in code if r == "pods"}
    if "--leader-elect" in args:
        name = lease_name(args)
        required |= {(g, r, v, None if v in UNNAMEABLE_VERBS else name) for g, r, v in code if r == "leases"}
    return required


# ------------------------------------------------------------------------------------- from the manifests
def granted_permissions(objs: list[dict]) -> set[Permission]:
    """Every permission the rendered Roles give the planner's ServiceAccount (each rule expanded)."""
    assert not by_kind(objs, "ClusterRole") and not by_kind(objs, "ClusterRoleBinding")
    (sa,) = by_kind(objs, "ServiceAccount")
    roles = {r["metadata"]["name"]: r for r in by_kind(objs, "Role")}
    bound = set()
    for binding in by_kind(objs, "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role" and binding["roleRef"]["name"] in roles, binding["roleRef"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                        "namespace": sa["metadata"]["namespace"]}]
        bound.add(binding["roleRef"]["name"])
    assert bound == set(roles), f"Roles bound to nobody: {set(roles) - bound}"
    out: set[Permission] = set()
    for role in roles.values():
        for rule in role["rules"]:
            fields = [rule["apiGroups"], rule["resources"], rule["verbs"], rule.get("resourceNames", [])]
            assert not any("*" in f for f in fields), f"wildcard in Role {role['metadata']['name']}: {rule}"
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out |= {(g, r, v, n) for n in rule.get("resourceNames") or [None]}
    return out


def allows(granted: set[Permission], wanted: Permission) -> bool:
    group, resource, verb, name = wanted
    return (group, resource, verb, None) in granted or (name is not None and wanted in granted)


# ------------------------------------------------------------------------------------- tests
def test_the_code_scan_finds_the_calls_the_actuator_and_elector_make() -> None:
    code = code_permissions()
    # The scan is the source of truth; this only guards against it silently finding nothing.
    assert ("apps", "deployments/scale", "get") in code and ("coordination.k8s.io", "leases", "create") in code
    assert {("", "pods", "list"), ("", "pods", "patch")} <= code  # the pod-deletion-cost mark
    assert {r for _, r, _ in code if r.endswith("/scale")} >= {f"{p}/scale" for _, p in SCALABLE_KINDS.values()}


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_roles_grant_exactly_what_the_code_calls(name: str, tmp_path: Path) -> None:
    objs = render(DEPLOY / "overlays" / name)
    required = required_permissions(objs, tmp_path)
    granted = granted_permissions(objs)
    assert granted == required, (f"overlay {name}: granted but never used {sorted(granted - required, key=str)}; "
                                 f"used but not granted {sorted(required - granted, key=str)}")
    pod = by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is bool(required), "a token exactly when there is a Role"
    (sa,) = by_kind(objs, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    if not required:  # advisory, keda, hpa today: the planner publishes N and writes nothing to the cluster
        assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")


def test_events_become_required_as_soon_as_the_code_emits_them(tmp_path: Path) -> None:
    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "events.py").write_text(
        "from kubernetes import client\n"
        "def emit(api, ns, body):\n"
        "    client.CoreV1Api(api).create_namespaced_event(ns, body)\n"
        "    client.EventsV1Api(api).create_namespaced_event(ns, body)\n")
    found = {permission(*endpoint(c, m)) for c, m in referenced_api_methods(tmp_path / "planner")}
    assert found == {("", "events", "create", None), ("events.k8s.io", "events", "create", None)}


def test_catalog_of_scale_rules_covers_every_kind_the_actuator_supports() -> None:
    """overlays/direct/rbac.yaml lists, in comments, the rule for each kind of targets.py."""
    text = (DEPLOY / "overlays" / "direct" / "rbac.yaml").read_text()
    catalog = [yaml.safe_load(line[3:]) for line in text.splitlines() if line.startswith("# - {")]
    listed = {(r["apiGroups"][0], r["resources"][0], tuple(sorted(r["verbs"]))) for r in catalog}
    code = code_permissions()
    expected = {(g, f"{p}/scale", tuple(sorted(v for cg, cr, v in code if (cg, cr) == (g, f"{p}/scale"))))
                for g, p in SCALABLE_KINDS.values()}
    assert listed == expected
    assert all(r["resourceNames"] == ["NAME"] for r in catalog)


@dataclass
class RbacKube(FakeKube):
    """The fake API server, refusing (403) every request the given permissions do not allow."""

    granted: set[Permission] = field(default_factory=set)
    refused: list[Permission] = field(default_factory=list)

    def dispatch(self, method: str, path: str, body: Any, content_type: str) -> tuple[int, dict[str, Any]]:
        wanted = permission(method, path)
        if not allows(self.granted, wanted):
            self.refused.append(wanted)
            group, resource, verb, name = wanted
            return status_body(403, "Forbidden", f'{resource} "{name}" is forbidden: cannot {verb} resource '
                               f'"{resource}" in API group "{group}"')
        return super().dispatch(method, path, body, content_type)


def test_direct_overlay_roles_let_the_real_actuator_and_elector_work(tmp_path: Path) -> None:
    objs = render(DEPLOY / "overlays" / "direct")
    policy = policy_of(objs, tmp_path)
    targets = targets_from_policy(policy, policy.actuator.kind)
    kube = RbacKube(granted=granted_permissions(objs)).start()
    try:
        for t in targets.values():
            kube.add(t.group, t.version, t.plural, t.namespace, t.name, replicas=1)
        kube.add("apps", "v1", "deployments", "llm", "not-a-target", replicas=1)
        api = kube.api_client()
        applied = KubernetesScaleActuator(targets, api).apply({"prefill": 3, "decode": 5})
        assert applied.changed and kube.replicas("deployments", "llm", "qwen-prefill") == 3
        assert kube.replicas("deployments", "llm", "qwen-decode") == 5
        elector = LeaseElector(api, lease_name(["run"]), "llm", "planner-0", lease_duration_s=15)
        assert elector.step(1000.0) and elector.step(1005.0)  # create, then read + renew
        elector.release(1006.0)
        events = ScaleEvents(api, targets, policy.name)
        t = targets["decode"]
        assert events._emit(t, events._body(t, "SlaCapacity", "pool decode 1 -> 5", 1007.0))
        assert kube.refused == [] and len(kube.events) == 1
        # Scoped by resourceNames: the same kind, another name, is refused - and the error says what to grant.
        other = resolve_target("decode", "apps/v1", "Deployment", "llm", "not-a-target", 1)
        with pytest.raises(ActuationError, match="forbidden.*deployments/scale"):
            KubernetesScaleActuator({"decode": other}, api).apply({"decode": 2})
        assert kube.refused == [("apps", "deployments/scale", "get", "not-a-target")]
        assert kube.replicas("deployments", "llm", "not-a-target") == 1
    finally:
        kube.stop()


@pytest.mark.parametrize("kind", sorted(SCALABLE_KINDS), ids=sorted(SCALABLE_KINDS))
def test_rbac_hint_points_to_a_shipped_file_with_its_rule(kind: str) -> None:
    """A 403 tells the operator which rule to add and where the shipped one is (it must exist)."""
    group, plural = SCALABLE_KINDS[kind]
    target = resolve_target("decode", f"{group}/v1", kind, "llm", "dec", 1)
    hint = target.rbac_hint()
    path = re.search(r"\((deploy/[^:]+):", hint)
    assert path is not None and (REPO / path.group(1)).is_file(), hint
    rule = yaml.safe_load(re.search(r"(\{apiGroups.*\}) \(", hint).group(1))  # type: ignore[union-attr]
    assert rule == {"apiGroups": [group], "resources": [f"{plural}/scale"], "verbs": ["get", "update"],
                    "resourceNames": ["dec"]}
    catalog = (REPO / path.group(1)).read_text()
    assert f"resources: [{plural}/scale]" in catalog
