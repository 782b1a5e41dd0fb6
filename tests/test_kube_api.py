"""The planner's Kubernetes calls on a real kube-apiserver + etcd (RBAC on, audit log), through the official client.

- each overlay's rendered RBAC, applied: as the planner's ServiceAccount, get/update ``/scale`` of its targets,
  the Lease and Events succeed, anything else is 403, and every verb granted is used (the audit log);
- the Events on a target show in ``kubectl describe deployment`` (they carry the target's uid);
- the API faults docs/faults.md lists: 403 on ``/scale`` and on the Lease, a missing target (404), a 409
  storm (each write's read made stale by another writer's real update);
- every manifest under deploy/ and what ``planner init`` writes pass server-side dry-run, with the KEDA and
  prometheus-operator CRDs installed first.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import yaml

from planner.actuators.deletion_cost import ANNOTATION
from planner.actuators.errors import ActuationError
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.targets import ScaleTarget, targets_from_policy
from planner.controller import make_planner_controller
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.events import ScaleEvents
from planner.service.leader import LeaseElector
from planner.service.loop import ControlLoop
from planner.telemetry import PlannerMetrics
from planner.testing.clock import FakeClock
from planner.testing.kube_apiserver import KubeAPIServer, crds_dir, service_account_user
from planner.types import Observation, PoolObservation
from tests.support.kube_objects import (
    RBAC_KINDS,
    annotations,
    apply,
    default_service_account,
    deployment,
    granted,
    in_namespace,
    pod,
    set_ready,
    used,
)
from tests.test_deploy import DEPLOY, OVERLAYS, REPO, by_kind, policy_of, render

pytestmark = pytest.mark.kube
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"


def rendered_targets(objs: list[dict], tmp_path: Path, namespace: str) -> dict[str, ScaleTarget]:
    policy = policy_of(objs, tmp_path)
    return {p: replace(t, namespace=namespace) for p, t in targets_from_policy(policy, "kubernetes").items()}


def replicas(kube: KubeAPIServer, namespace: str, name: str) -> int:
    return int(kube.kubectl("-n", namespace, "get", "deployment", name, "-o", "jsonpath={.spec.replicas}").stdout)


def api_status(fn, *args) -> int:  # noqa: ANN001
    from kubernetes.client.exceptions import ApiException

    try:
        fn(*args)
    except ApiException as exc:
        return int(exc.status)
    return 200


# ----------------------------------------------------------------------------------------- RBAC, audited
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rendered_rbac_grants_what_the_planner_uses_and_nothing_else(overlay: str, kube: KubeAPIServer,
                                                                     kube_namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    ns = kube_namespace
    objs = manifests()[f"overlays/{overlay}"]
    rbac = in_namespace([o for o in objs if o["kind"] in RBAC_KINDS], ns)
    apply(kube, rbac)
    targets = rendered_targets(objs, tmp_path, ns)
    apply(kube, [*(deployment(ns, t.name, 1) for t in targets.values()), deployment(ns, "other", 1)])
    (sa,) = by_kind(rbac, "ServiceAccount")
    api = kube.api_client(kube.kubeconfig_for(ns, sa["metadata"]["name"]))
    grants = granted(by_kind(rbac, "Role"))
    scales = any(r.endswith("/scale") for _, r, _, _ in grants)
    act = KubernetesScaleActuator(targets, api, request_timeout_s=5)

    marks = ("", "pods", "patch", "") in grants
    if scales:
        for t in targets.values():
            assert act.scale(t, 2) == (1, 2, True)
            assert replicas(kube, ns, t.name) == 2
    if marks:  # a scale-down marks the pod it removes (pod-deletion-cost): list and patch on pods
        apply(kube, [default_service_account(ns)])
        for t in targets.values():
            for i in range(2):
                apply(kube, [pod(ns, f"{t.name}-{i}", {"app": t.name})])
                set_ready(kube, ns, f"{t.name}-{i}", ip=None)
            assert act.scale(t, 1) == (2, 1, True)
        marked = {n for n, a in annotations(kube, ns).items() if ANNOTATION in a}
        assert len(marked) == len(targets)
    else:
        with pytest.raises(ActuationError, match="forbidden"):
            act.read_replicas()
    if ("", "events", "create", "") in grants:
        events = ScaleEvents(api, targets, "rbac")
        for t in targets.values():
            assert events._emit(t, events._body(t, "SlaCapacity", "pool 1 -> 2", time.time(), events._identity(t)))
    lease_names = {n for g, r, _, n in grants if r == "leases" and n}
    for name in lease_names:
        clock = FakeClock(time.time())
        elector = LeaseElector(api, name, ns, "pod-a", 15.0, clock=clock.now_s, retry_period_s=1.0)
        assert elector.step(clock.now_s()) and elector.problem is None  # create
        clock.advance(2)
        assert elector.step(clock.now_s()) and elector.problem is None  # get + update (renew)

    # Anything else is 403: another Deployment's scale, the Deployments themselves, deleting pods (and listing
    # them where nothing is marked), another Lease.
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    other = KubernetesScaleActuator({"decode": replace(next(iter(targets.values())), name="other")}, api)
    with pytest.raises(ActuationError, match="forbidden"):
        other.read_replicas()
    name = next(iter(targets.values())).name
    assert api_status(apps.read_namespaced_deployment, name, ns) == 403
    assert api_status(apps.patch_namespaced_deployment, name, ns, {"spec": {"paused": True}}) == 403
    assert api_status(core.list_namespaced_pod, ns) == (200 if marks else 403)
    assert api_status(core.delete_namespaced_pod, "any", ns) == 403  # marked, never deleted by the planner
    assert api_status(core.read_namespaced_config_map, "planner-policy", ns) == 403
    stranger = LeaseElector(api, "someone-else", ns, "pod-a", 15.0)
    assert not stranger.step(time.time()) and stranger.problem is not None and "forbidden" in stranger.problem

    # Every verb granted was used, and nothing was used that is not granted (named where the rule names).
    done = used(kube, service_account_user(ns, sa["metadata"]["name"]), ns)
    assert {(g, r, v) for g, r, v, _ in grants} == {(g, r, v) for g, r, v, _ in done}
    for g, r, v, n in done:
        assert (g, r, v, n) in grants or (g, r, v, "") in grants, (g, r, v, n)


# ----------------------------------------------------------------------------------------- Events
class Load:
    def __init__(self, rate_rps: float) -> None:
        self.rate_rps = rate_rps

    def read(self, window_s: float, now_s: float) -> Observation:
        pool = PoolObservation(requests=self.rate_rps * window_s, rate_rps=self.rate_rps, isl_mean=2000,
                               osl_mean=300, ready_replicas=1)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


def policy_in(ns: str, **over: object):  # noqa: ANN201
    data = {"name": "kube", "profile": str(PROFILE), "interval_s": 30,
            "pools": {"prefill": {"target": {"name": "pre", "namespace": ns}, "min_replicas": 1, "max_replicas": 16},
                      "decode": {"target": {"name": "dec", "namespace": ns}, "min_replicas": 1, "max_replicas": 16}},
            "forecast": {"model": "last-value"}, "actuator": {"kind": "kubernetes"}}
    data.update(over)
    return parse_policy(data)


def loop_in(kube: KubeAPIServer, ns: str, api, rate_rps: float = 40.0,  # noqa: ANN001
            metrics: PlannerMetrics | None = None, targets: dict[str, ScaleTarget] | None = None) -> ControlLoop:
    pol = policy_in(ns)
    metrics = metrics or PlannerMetrics()
    targets = targets or targets_from_policy(pol, "kubernetes")
    act = KubernetesScaleActuator(targets, api, request_timeout_s=5,
                                  on_conflict=lambda pool: metrics.actuation_conflicts.labels(policy=pol.name,
                                                                                              pool=pool).inc())
    return ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Load(rate_rps), act, metrics,
                       FakeClock(time.time()), events=ScaleEvents(api, targets, pol.name, instance="pod-a"))


def test_kubectl_describe_shows_the_planners_events(kube: KubeAPIServer, kube_namespace: str) -> None:
    ns = kube_namespace
    apply(kube, [deployment(ns, "pre", 1), deployment(ns, "dec", 1)])
    result = loop_in(kube, ns, kube.api_client()).tick()
    assert result.applied is not None and result.applied.changed and result.error is None
    d = result.decision.pools["decode"]  # type: ignore[union-attr]
    assert d.replicas > 1
    text = kube.kubectl("-n", ns, "describe", "deployment", "dec").stdout
    events = text.split("Events:", 1)[1]
    assert "<none>" not in events, text
    assert "planner" in events and f"pool decode 1 -> {d.replicas} replicas" in events, events
    uid = kube.kubectl("-n", ns, "get", "deployment", "dec", "-o", "jsonpath={.metadata.uid}").stdout
    listed = yaml.safe_load(kube.kubectl("-n", ns, "get", "events", "-o", "yaml").stdout)["items"]
    ours = [e for e in listed if e["involvedObject"]["name"] == "dec"]
    assert ours and all(e["involvedObject"]["uid"] == uid and e["involvedObject"]["apiVersion"] == "apps/v1"
                        and e["involvedObject"]["resourceVersion"] for e in ours)


# ----------------------------------------------------------------------------------------- API faults
def sa_with(kube: KubeAPIServer, ns: str, rules: list[dict]) -> object:
    """An ApiClient for ServiceAccount ``ns/planner`` holding exactly ``rules``."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "planner-test", "namespace": ns}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "planner-test", "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "planner-test"},
               "subjects": [{"kind": "ServiceAccount", "name": "planner", "namespace": ns}]}
    kubeconfig = kube.kubeconfig_for(ns, "planner")
    if rules:
        apply(kube, [role, binding])
    return kube.api_client(kubeconfig)


SCALE_RULE = {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "update"],
              "resourceNames": ["pre", "dec"]}
EVENT_RULE = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}


def errors(metrics: PlannerMetrics, kind: str) -> float:
    return metrics.registry.get_sample_value("planner_errors_total", {"policy": "kube", "kind": kind}) or 0.0


def test_scale_forbidden_names_the_rule_and_writes_nothing(kube: KubeAPIServer, kube_namespace: str) -> None:
    ns = kube_namespace
    apply(kube, [deployment(ns, "pre", 1), deployment(ns, "dec", 1)])
    api = sa_with(kube, ns, [EVENT_RULE, {**SCALE_RULE, "verbs": ["get"]}])  # no update
    metrics = PlannerMetrics()
    loop = loop_in(kube, ns, api, metrics=metrics)
    result = loop.tick()
    assert result.error is not None and "forbidden" in result.error and "deployments/scale" in result.error
    assert "resourceNames" in result.error and errors(metrics, "actuate") == 1
    assert (replicas(kube, ns, "pre"), replicas(kube, ns, "dec")) == (1, 1)
    denied = [e for e in kube.audit_events(service_account_user(ns, "planner"))
              if e["verb"] == "update" and e["responseStatus"]["code"] == 403]
    assert denied  # the server said 403, not the client


def test_a_missing_target_is_named_and_the_other_pool_still_moves(kube: KubeAPIServer,
                                                                  kube_namespace: str) -> None:
    ns = kube_namespace
    apply(kube, [deployment(ns, "pre", 1)])  # no "dec"
    metrics = PlannerMetrics()
    loop = loop_in(kube, ns, sa_with(kube, ns, [SCALE_RULE, EVENT_RULE]), metrics=metrics)
    clock = loop.clock
    assert isinstance(clock, FakeClock)
    first = loop.tick()
    assert first.error is not None and "not found" in first.error and errors(metrics, "seed") == 1
    assert replicas(kube, ns, "pre") == 1  # nothing written before every target could be read
    apply(kube, [deployment(ns, "dec", 1)])
    clock.advance(30)
    assert loop.tick().error is None and replicas(kube, ns, "dec") > 1  # seeded once it exists, and acting
    kube.kubectl("-n", ns, "delete", "deployment", "dec")
    before = replicas(kube, ns, "pre")
    loop.source = Load(120.0)
    clock.advance(30)
    third = loop.tick()
    assert third.error is not None and "not found" in third.error and "pools.decode.target" in third.error
    assert errors(metrics, "actuate") == 1 and replicas(kube, ns, "pre") > before  # the other pool still moves


class StaleReads(KubernetesScaleActuator):
    """Every read is followed by another writer's real update of the Deployment (an annotation): the
    resourceVersion the write carries is stale, and the API server answers 409 - ``storm`` times."""

    storm = 0
    admin: object = None

    def read(self, t: ScaleTarget) -> tuple[int, str]:
        out = super().read(t)
        if self.storm > 0:
            self.storm -= 1
            from kubernetes import client

            client.AppsV1Api(self.admin).patch_namespaced_deployment(
                t.name, t.namespace, {"metadata": {"annotations": {"bump": str(time.time_ns())}}})
        return out


@pytest.mark.parametrize(("storm", "written"), [(1, True), (3, True), (10, False)], ids=["1", "3", "storm"])
def test_409s_are_retried_counted_and_bounded(kube: KubeAPIServer, kube_namespace: str, storm: int,
                                              written: bool) -> None:
    ns = kube_namespace
    apply(kube, [deployment(ns, "dec", 1)])
    conflicts: list[str] = []
    t = targets_from_policy(policy_in(ns), "kubernetes")["decode"]
    act = StaleReads({"decode": t}, sa_with(kube, ns, [SCALE_RULE]), on_conflict=conflicts.append)
    act.admin, act.storm = kube.api_client(), storm
    if written:
        assert act.scale(t, 3) == (1, 3, True)
        assert conflicts == ["decode"] * storm and replicas(kube, ns, "dec") == 3
    else:
        with pytest.raises(ActuationError, match="still conflicting after 4 attempts"):
            act.scale(t, 3)
        assert len(conflicts) == 4 and replicas(kube, ns, "dec") == 1
    codes = [e["responseStatus"]["code"] for e in kube.audit_events(service_account_user(ns, "planner"))
             if e["verb"] == "update" and e["objectRef"].get("namespace") == ns]
    assert codes.count(409) == len(conflicts)  # real 409s from the server


def test_a_lease_that_cannot_be_taken_exits_1_with_the_rule(kube: KubeAPIServer, kube_namespace: str,
                                                            tmp_path: Path) -> None:
    ns = kube_namespace
    apply(kube, [deployment(ns, "pre", 1), deployment(ns, "dec", 1)])
    sa_with(kube, ns, [SCALE_RULE, EVENT_RULE])  # no leases
    data = yaml.safe_load((REPO / "policies" / "example.yaml").read_text())
    data["profile"] = str(PROFILE)
    data["pools"] = {"prefill": {"target": {"name": "pre", "namespace": ns}},
                     "decode": {"target": {"name": "dec", "namespace": ns}}}
    data["metrics"]["selectors"] = {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(data))
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "run", "--policy", str(tmp_path / "policy.yaml"),
                           "--once", "--leader-elect", "--lease-namespace", ns, "--metrics-url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**_env(), "KUBECONFIG": str(kube.kubeconfig_for(ns, "planner"))})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "forbidden" in proc.stderr and "deploy/components/leader-election" in proc.stderr
    assert "Traceback" not in proc.stderr
    lease_calls = [e for e in kube.audit_events(service_account_user(ns, "planner"))
                   if (e.get("objectRef") or {}).get("resource") == "leases"]
    assert lease_calls and all(e["responseStatus"]["code"] == 403 for e in lease_calls)


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}


# ----------------------------------------------------------------------------------------- dry-run
@cache
def manifests() -> dict[str, list[dict]]:
    out = {f"overlays/{o}": render(DEPLOY / "overlays" / o) for o in sorted(OVERLAYS)}
    out["crds"] = render(DEPLOY / "crds")
    out["profile-requests"] = render(DEPLOY / "profile-requests")
    # Applied as they are (docs/deploy.md). The components, base/ and overlays' files are kustomize inputs,
    # checked in the renders above; deploy/prometheus/planner-rules.yaml is a Prometheus rules file, which the
    # alerts component wraps in the PrometheusRule the overlays render.
    for path in sorted((DEPLOY / "engines").glob("*.yaml")):
        out[str(path.relative_to(DEPLOY))] = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def test_every_manifest_and_what_init_writes_pass_server_side_dry_run(kube: KubeAPIServer,
                                                                     tmp_path: Path) -> None:
    from planner.cli import run

    crds = crds_dir()
    assert crds is not None and sorted(crds.glob("*.yaml")), "the KEDA and prometheus-operator CRDs (../shared/kube/crds)"
    kube.kubectl("apply", "--server-side", "-f", str(crds))
    apply(kube, render(DEPLOY / "crds"))
    kube.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    kube.ensure_namespace("llm")
    out = tmp_path / "init"
    assert run(["init", "--model", "qwen3-32b", "--gpu", "h200", "--isl", "1200", "--osl", "220", "--rate-rps", "20",
                "--ttft-ms", "1000", "--itl-ms", "40", "--total-gpus", "64", "--namespace", "llm",
                "--out", str(out)]) == 0
    sets = {**manifests(), "planner init": render(out / "manifests")}
    assert all(sets.values()), sets
    # One request stream for all of them (a dry run stores nothing, so the overlays' shared objects do not
    # collide); kubectl names each object it could not apply.
    objs = [o for group in sets.values() for o in group]
    proc = kube.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=dry-run", "-f", "-",
                        input_text=yaml.safe_dump_all(objs), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("(server dry run)") == len(objs), proc.stdout
