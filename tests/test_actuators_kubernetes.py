"""KubernetesScaleActuator through the official client against the fake API server (tests/support/fake_kube.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from planner.actuators.errors import ActuationError
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.targets import resolve_target, targets_from_policy
from planner.errors import UserError
from planner.policy_file import parse_policy
from planner.types import Applied
from tests.support.fake_kube import FakeKube

NS = "llm"
DGDSA = ("nvidia.com", "v1alpha1", "dynamographdeploymentscalingadapters")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


def actuator(kube: FakeKube, floor: int = 1) -> KubernetesScaleActuator:
    kube.add_deployment(NS, "dec", 2)
    kube.add("apps", "v1", "statefulsets", NS, "pre", 1)
    targets = {"decode": resolve_target("decode", "apps/v1", "Deployment", NS, "dec", floor),
               "prefill": resolve_target("prefill", "apps/v1", "StatefulSet", NS, "pre", floor)}
    return KubernetesScaleActuator(targets, kube.api_client())


@pytest.mark.parametrize("kind,api,group_version_plural", [
    ("DynamoGraphDeploymentScalingAdapter", "nvidia.com/v1alpha1", DGDSA),
    ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", LWS),
], ids=["dgdsa", "lws"])
def test_custom_resource_scale(kube: FakeKube, kind: str, api: str, group_version_plural: tuple) -> None:
    group, version, plural = group_version_plural
    kube.add(group, version, plural, NS, "g-decode", 1)
    act = KubernetesScaleActuator({"decode": resolve_target("decode", api, kind, NS, "g-decode", 1)},
                                  kube.api_client())
    assert act.apply({"decode": 4}) == Applied(before={"decode": 1}, after={"decode": 4}, changed=True)
    assert kube.replicas(plural, NS, "g-decode", group) == 4
    assert ("PUT", f"/apis/{group}/{version}/namespaces/{NS}/{plural}/g-decode/scale") in kube.writes()


def test_scales_builtin_kinds_and_is_idempotent(kube: FakeKube) -> None:
    act = actuator(kube)
    first = act.apply({"decode": 5, "prefill": 3})
    assert first == Applied(before={"decode": 2, "prefill": 1}, after={"decode": 5, "prefill": 3}, changed=True)
    assert (kube.replicas("deployments", NS, "dec"), kube.replicas("statefulsets", NS, "pre")) == (5, 3)
    writes = len(kube.writes())
    again = act.apply({"decode": 5, "prefill": 3})
    assert again.changed is False and len(kube.writes()) == writes  # no write when already there


def test_write_carries_resource_version(kube: FakeKube) -> None:
    act = actuator(kube)
    rv_before = kube.objects[("apps", "deployments", NS, "dec")].resource_version
    act.apply({"decode": 3})
    obj = kube.objects[("apps", "deployments", NS, "dec")]
    assert obj.resource_version > rv_before


@pytest.mark.parametrize("conflicts,ok", [(1, True), (3, True), (4, False)], ids=["one", "three", "exhausted"])
def test_conflict_then_retry(kube: FakeKube, conflicts: int, ok: bool) -> None:
    act = actuator(kube)
    kube.conflicts_to_inject = conflicts
    if ok:
        assert act.apply({"decode": 6}).changed
        assert kube.replicas("deployments", NS, "dec") == 6
    else:
        with pytest.raises(ActuationError, match="still conflicting after 4 attempts"):
            act.apply({"decode": 6})
        assert kube.replicas("deployments", NS, "dec") == 2


def test_external_change_is_observed(kube: FakeKube) -> None:
    act = actuator(kube)
    act.apply({"decode": 4})
    kube.set_replicas("deployments", NS, "dec", 7)  # kubectl scale by someone else
    applied = act.apply({"decode": 4})
    assert applied.before["decode"] == 7 and applied.changed
    assert kube.replicas("deployments", NS, "dec") == 4


@pytest.mark.parametrize("setup,match", [
    (lambda k: k.forbidden.add(("deployments/scale", "update")),
     r'forbidden .*cannot update resource "deployments/scale".*resources: \["deployments/scale"\]'),
    (lambda k: k.forbidden.add(("deployments/scale", "get")), r"forbidden .*rbac\.yaml"),
    (lambda k: k.objects.pop(("apps", "deployments", NS, "dec")),
     r"Deployment llm/dec \(apps/v1, pool decode\): not found .*pools\.decode\.target"),
], ids=["403-update", "403-get", "404"])
def test_clear_errors(kube: FakeKube, setup, match: str) -> None:  # noqa: ANN001
    act = actuator(kube)
    setup(kube)
    with pytest.raises(ActuationError, match=match):
        act.apply({"decode": 3})


def test_one_failing_pool_does_not_block_the_other(kube: FakeKube) -> None:
    act = actuator(kube)
    kube.forbidden_objects.add(("deployments", NS, "dec"))
    with pytest.raises(ActuationError, match="dec"):
        act.apply({"decode": 3, "prefill": 4})
    assert kube.replicas("statefulsets", NS, "pre") == 4


def test_never_below_floor(kube: FakeKube) -> None:
    act = actuator(kube, floor=2)
    applied = act.apply({"decode": 0})
    assert applied.after["decode"] == 2 and kube.replicas("deployments", NS, "dec") == 2


def test_unreachable_api_names_target() -> None:
    from kubernetes import client

    cfg = client.Configuration(host="http://127.0.0.1:9")
    cfg.retries = 0
    act = KubernetesScaleActuator({"decode": resolve_target("decode", "apps/v1", "Deployment", NS, "x", 1)},
                                  client.ApiClient(cfg), request_timeout_s=2)
    with pytest.raises(ActuationError, match="Deployment llm/x .*cannot reach the Kubernetes API"):
        act.apply({"decode": 2})


@pytest.mark.parametrize("target,match", [
    ({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x"}, "kind' = 'ReplicaSet'"),
    ({"apiVersion": "dynamo.nvidia.com/v1alpha1", "kind": "DynamoGraphDeploymentScalingAdapter", "name": "x"},
     "lives in API group 'nvidia.com'"),
    ({"apiVersion": "v1", "kind": "Deployment", "name": "x"}, "expected group/version"),
], ids=["kind", "wrong-group", "no-group"])
def test_bad_targets_are_user_errors(target: dict, match: str) -> None:
    policy = parse_policy({"name": "p", "profile": "x.json", "pools": {"prefill": {"target": target},
                                                                      "decode": {"target": target}}})
    with pytest.raises(UserError, match=match):
        targets_from_policy(policy, policy.actuator.kind)


def test_missing_target_is_user_error() -> None:
    policy = parse_policy({"name": "p", "profile": "x.json", "pools": {"prefill": {}, "decode": {}}})
    with pytest.raises(UserError, match="pools.prefill.target' is required"):
        targets_from_policy(policy, policy.actuator.kind)


def test_fake_server_speaks_the_api(kube: FakeKube) -> None:
    """The fake answers the official client like an API server: PATCH, 422 and 409 with Status bodies."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    kube.add_deployment(NS, "dec", 2)
    apps = client.AppsV1Api(kube.api_client())
    patched = apps.patch_namespaced_deployment_scale("dec", NS, {"spec": {"replicas": 3}})
    assert patched.spec.replicas == 3 and patched.status.selector == "app=dec"
    rv = patched.metadata.resource_version
    cases = [({"spec": {"replicas": -1}}, 422, "Invalid"),
             ({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 4}}, 409, "Conflict")]
    for body, code, reason in cases:
        with pytest.raises(ApiException) as info:
            apps.patch_namespaced_deployment_scale("dec", NS, body)
        status = json.loads(info.value.body)
        assert (info.value.status, status["kind"], status["reason"], status["code"]) == (code, "Status", reason, code)
    assert apps.read_namespaced_deployment_scale("dec", NS).metadata.resource_version == rv  # failed writes change nothing
