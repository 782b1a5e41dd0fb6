"""Least privilege for the profile-request controller (deploy/profile-requests): its Role grants exactly what
planner/requests calls, derived from the code as tests/test_rbac.py does for the controller, and a fake API
server enforcing that Role runs a full request with auto_apply and a rollback without a refusal."""

from __future__ import annotations

from pathlib import Path

from planner.requests.kube import APPLY_KINDS, GROUP, KIND, PLURAL, VERSION, ProfileRequestWatcher
from planner.requests.manager import RequestManager
from planner.requests.store import ResultsStore
from planner.testing.clock import FakeClock
from tests.support.requests_support import install, spec_data
from tests.test_deploy import DEPLOY, REPO, by_kind, render
from tests.test_rbac import RbacKube, endpoint, granted_permissions, permission, referenced_api_methods

NS = "llm"


def required() -> set[tuple[str, str, str, str | None]]:
    """Each custom-object call of planner/requests, on the kinds it is made for: list and status writes on
    ProfileRequests; create and (rollback) delete on the kinds auto_apply renders. Plus every call of the
    profiler's backends (planner/profiler), which a "thorough" request runs in this controller: the
    kubernetes backend creates, reads and deletes one worker Deployment and Service per TP."""
    out = set()
    for cls, method in referenced_api_methods(REPO / "planner" / "requests"):
        group, resource, verb, _ = permission(*endpoint(cls, method))
        assert group == "{group}", f"{cls}.{method}: a call this test does not know how to scope"
        if verb in ("list", "patch") or resource.endswith("/status"):
            out.add((GROUP, resource.replace("{plural}", PLURAL), verb, None))
        else:
            out |= {(g, resource.replace("{plural}", p), verb, None) for g, p in APPLY_KINDS.values()}
    for cls, method in referenced_api_methods(REPO / "planner" / "profiler"):
        group, resource, verb, _ = permission(*endpoint(cls, method))
        assert "{" not in group + resource, f"{cls}.{method}: a call this test does not know how to scope"
        out.add((group, resource, verb, None))  # workers get generated names: resourceNames cannot scope them
    return out


def test_the_role_grants_exactly_what_the_code_calls() -> None:
    objs = render(DEPLOY / "profile-requests")
    need = required()
    assert need >= {(GROUP, PLURAL, "list", None), (GROUP, f"{PLURAL}/status", "patch", None),
                    ("apps", "deployments", "create", None), ("keda.sh", "scaledobjects", "delete", None),
                    ("apps", "deployments", "get", None), ("", "services", "create", None)}
    granted = granted_permissions(objs)
    assert granted == need, (f"granted, never used {sorted(granted - need, key=str)}; used, not granted "
                             f"{sorted(need - granted, key=str)}")
    (crd,) = by_kind(objs, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    (deploy,) = by_kind(objs, "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "serve" and args[args.index("--watch-namespace") + 1] == "$(POD_NAMESPACE)"
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "CustomResourceDefinition"} == {NS}


def test_the_real_watcher_works_within_the_role(tmp_path: Path) -> None:
    kube = RbacKube(granted=granted_permissions(render(DEPLOY / "profile-requests"))).start()
    manager = RequestManager(ResultsStore(tmp_path), FakeClock(), default_namespace=NS)
    try:
        install(kube)
        watcher = ProfileRequestWatcher(kube.api_client(), NS, manager, FakeClock())
        kube.create_object({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "taken-decode", "namespace": NS}, "spec": {}})
        for name, base in (("chat", "chat"), ("clash", "taken")):  # the second rolls back what it created
            kube.create_object({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                "metadata": {"name": name, "namespace": NS},
                                "spec": spec_data(auto_apply=True, name=base)})
        watcher.poll_once()
        for item in kube.list_objects(GROUP, PLURAL, NS):
            manager.wait(f"k8s-{item['metadata']['uid']}", 30)
        watcher.poll_once()
        phases = {o["metadata"]["name"]: (o["status"]["phase"], o["status"].get("reason"))
                  for o in kube.list_objects(GROUP, PLURAL, NS)}
        assert phases == {"chat": ("Ready", None), "clash": ("Failed", "ApplyFailed")}
        assert kube.refused == []
        assert ("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/taken-prefill") in kube.writes()
    finally:
        manager.shutdown()
        kube.stop()


def test_a_missing_grant_is_a_clear_failure(tmp_path: Path) -> None:
    granted = granted_permissions(render(DEPLOY / "profile-requests"))
    kube = RbacKube(granted={p for p in granted if p[0] != "keda.sh"}).start()
    manager = RequestManager(ResultsStore(tmp_path), FakeClock(), default_namespace=NS)
    try:
        install(kube)
        kube.create_object({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "chat",
                            "namespace": NS}, "spec": spec_data(auto_apply=True)})
        watcher = ProfileRequestWatcher(kube.api_client(), NS, manager, FakeClock())
        watcher.poll_once()
        manager.wait(f"k8s-{kube.list_objects(GROUP, PLURAL, NS)[0]['metadata']['uid']}", 30)
        watcher.poll_once()
        status = kube.list_objects(GROUP, PLURAL, NS)[0]["status"]
        assert status["reason"] == "ApplyFailed" and "forbidden" in status["message"]
        assert [o for o in kube.list_objects("apps", "deployments", NS)] == []
    finally:
        manager.shutdown()
        kube.stop()


