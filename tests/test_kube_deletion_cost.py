"""Scale-down on a real kube-apiserver: before the Scale is lowered, the least loaded Ready pod is marked with
``controller.kubernetes.io/pod-deletion-cost`` (lowest), a mark left from an earlier scale-down is lifted,
and the not-ready pods - which the ReplicaSet removes first anyway - are left alone. The audit log gives the
order of the writes and their bodies. No kubelet runs: Pods are created directly with the Deployment's
labels and made Ready through their status subresource; their engines are `planner emulate` processes on
127.0.0.1 (the pods' IP), each pod naming its emulator's port."""

from __future__ import annotations

import threading
import time

import pytest

from planner.actuators.deletion_cost import ANNOTATION, MARK
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.targets import resolve_target
from planner.testing.kube_apiserver import KubeAPIServer, service_account_user
from tests.support.endpoint_fixtures import EmulatorProcess, running_requests
from tests.support.kube_objects import annotations, apply, default_service_account, deployment, pod, set_ready
from tests.support.process_fixtures import EMULATED_PROFILE, stream, wait_until
from tests.test_kube_api import EVENT_RULE, SCALE_RULE, sa_with

pytestmark = pytest.mark.kube
POD_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}  # deploy/overlays/direct


def writes(kube: KubeAPIServer, ns: str) -> list[tuple[str, str, object]]:
    """(resource, name, what was written) of the planner's successful writes, in order."""
    out: list[tuple[str, str, object]] = []
    for e in kube.audit_events(service_account_user(ns, "planner")):
        ref = e.get("objectRef") or {}
        if e["verb"] not in ("patch", "update") or ref.get("namespace") != ns or e["responseStatus"]["code"] != 200:
            continue
        body = e.get("requestObject") or {}
        if ref.get("subresource") == "scale":
            out.append(("deployments/scale", ref["name"], body["spec"]["replicas"]))
        else:
            out.append((ref["resource"], ref["name"], body["metadata"]["annotations"][ANNOTATION]))
    return out


def test_scale_down_marks_the_least_loaded_ready_pod_before_lowering_the_count(kube: KubeAPIServer,
                                                                                 kube_namespace: str) -> None:
    ns = kube_namespace
    apply(kube, [deployment(ns, "dec", 4), default_service_account(ns)])
    labels = {"app": "dec"}  # the Deployment's selector: what its Scale reports as status.selector
    emulators = [EmulatorProcess(EMULATED_PROFILE, time_scale=10, model_name="emu") for _ in range(3)]
    results: list = []
    try:
        for e in emulators:
            e.wait_ready()
        idle, busy_a, busy_b = emulators
        # "idle" is the oldest: the old rule (remove the newest) would pick a busy one.
        apply(kube, [pod(ns, "idle", labels, idle.port)])
        time.sleep(1.1)  # creationTimestamp has 1 s resolution
        stale = pod(ns, "busy-b", labels, busy_b.port)
        stale["metadata"]["annotations"] = {ANNOTATION: MARK}  # marked by an earlier scale-down it survived
        apply(kube, [pod(ns, "busy-a", labels, busy_a.port), stale, pod(ns, "pending", labels)])
        for name in ("idle", "busy-a", "busy-b"):
            set_ready(kube, ns, name)  # "pending" stays unscheduled: the ReplicaSet removes it first anyway
        clients = [threading.Thread(target=lambda e=e: results.append(stream(e.url, "a b c " * 20, 200)))
                   for e in (busy_a, busy_b)]
        for c in clients:
            c.start()
        wait_until(lambda: running_requests(busy_a.url) >= 1 and running_requests(busy_b.url) >= 1, 15,
                   "one stream on each busy engine")
        target = resolve_target("decode", "apps/v1", "Deployment", ns, "dec", 1)
        act = KubernetesScaleActuator({"decode": target}, sa_with(kube, ns, [SCALE_RULE, EVENT_RULE, POD_RULE]),
                                      request_timeout_s=5)
        assert act.scale(target, 2) == (4, 2, True)
        marks = {name: a.get(ANNOTATION) for name, a in annotations(kube, ns).items()}
        # 4 -> 2 removes two: "pending" (not ready: first in the ReplicaSet's order) and the marked one.
        assert marks == {"idle": MARK, "busy-a": None, "busy-b": None, "pending": None}
        assert writes(kube, ns) == [("pods", "busy-b", None), ("pods", "idle", MARK), ("deployments/scale", "dec", 2)]
        for c in clients:
            c.join(60)
    finally:
        for e in emulators:
            e.stop()
    assert len(results) == 2 and all(s.status == 200 and s.done for s in results)


def test_equal_loads_mark_the_newest_and_not_ready_pods_that_cover_the_cut_mark_none(kube: KubeAPIServer,
                                                                                    kube_namespace: str) -> None:
    """Pods with no IP (load unknown): the newest goes. A cut the not-ready pods cover marks nothing."""
    ns = kube_namespace
    apply(kube, [deployment(ns, "dec", 4), default_service_account(ns)])
    labels = {"app": "dec"}
    for name in ("old", "new"):
        apply(kube, [pod(ns, name, labels)])
        set_ready(kube, ns, name, ip=None)  # Ready, but no engine to ask (no IP)
        time.sleep(1.1)
    apply(kube, [pod(ns, "starting-1", labels), pod(ns, "starting-2", labels)])
    target = resolve_target("decode", "apps/v1", "Deployment", ns, "dec", 1)
    act = KubernetesScaleActuator({"decode": target}, sa_with(kube, ns, [SCALE_RULE, POD_RULE]), request_timeout_s=5)
    assert act.scale(target, 2) == (4, 2, True)  # the two not ready go: nothing to choose
    assert writes(kube, ns) == [("deployments/scale", "dec", 2)]
    kube.kubectl("-n", ns, "delete", "pod", "starting-1", "starting-2", "--wait=false")
    assert act.scale(target, 1) == (2, 1, True)
    assert writes(kube, ns)[1:] == [("pods", "new", MARK), ("deployments/scale", "dec", 1)]
