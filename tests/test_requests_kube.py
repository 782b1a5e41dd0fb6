"""ProfileRequest objects in a cluster, through the official client against the fake API server: the CRD's
schema and immutable spec, status through the subresource, auto_apply, and nothing left behind on failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.requests.kube import GROUP, KIND, OWNER_LABEL, PLURAL, VERSION, ProfileRequestWatcher
from planner.requests.manager import RequestManager
from planner.requests.store import ResultsStore
from planner.testing.clock import FakeClock
from tests.support.fake_kube import FakeKube
from tests.support.requests_support import blocking_backend, install, spec_data

NS = "llm"


class Cluster:
    def __init__(self, kube: FakeKube, results: Path) -> None:
        self.kube = kube
        self.manager = RequestManager(ResultsStore(results), FakeClock(), default_namespace=NS)
        self.watcher = ProfileRequestWatcher(kube.api_client(), NS, self.manager, FakeClock())

    def create(self, name: str, **overrides: Any) -> dict[str, Any]:
        return self.kube.create_object({"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                        "metadata": {"name": name, "namespace": NS}, "spec": spec_data(**overrides)})

    def obj(self, name: str) -> dict[str, Any]:
        found = self.kube.get_object(GROUP, PLURAL, NS, name)
        assert found is not None
        return found

    def settle(self, name: str) -> dict[str, Any]:
        """Poll, let the request finish, poll again: the object's final status."""
        self.watcher.poll_once()
        uid = self.obj(name)["metadata"]["uid"]
        if self.manager.get(f"k8s-{uid}") is not None:
            self.manager.wait(f"k8s-{uid}", 30)
        self.watcher.poll_once()
        return self.obj(name)["status"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    kube = FakeKube().start()
    install(kube)
    c = Cluster(kube, tmp_path / "results")
    yield c
    c.manager.shutdown()
    kube.stop()


def applied(kube: FakeKube) -> list[tuple[str, str]]:
    return sorted((p, o["metadata"]["name"]) for (g, p, ns, n), o in kube.custom.items() if p != PLURAL)


def test_a_request_runs_and_its_status_is_written_through_the_subresource(cluster: Cluster) -> None:
    cluster.create("chat")
    status = cluster.settle("chat")
    assert status["phase"] == "Ready" and status["result"]["pools"]["prefill"]["replicas"] >= 1
    assert status["observed_generation"] == 1 and status["result"]["applied"] == []
    writes = {(m, p) for m, p in cluster.kube.writes() if "profilerequests" in p}
    assert writes == {("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/chat/status")}
    assert cluster.obj("chat")["metadata"]["generation"] == 1  # status writes never touch the spec
    assert applied(cluster.kube) == []  # no auto_apply: nothing created
    writes_before = len(cluster.kube.writes())
    cluster.watcher.poll_once()
    assert len(cluster.kube.writes()) == writes_before  # unchanged status: no write


def test_the_crd_schema_and_immutable_spec_are_enforced_by_the_api_server(cluster: Cluster) -> None:
    with pytest.raises(AssertionError, match="ttft_ms"):
        cluster.create("bad", **{"sla.ttft_ms": -1})
    cluster.create("chat")
    reply = cluster.kube.update_object(GROUP, PLURAL, NS, "chat", {"spec": {"sla": {"ttft_ms": 500}}})
    assert reply["code"] == 422 and "spec is immutable" in reply["message"]


def test_a_bad_request_fails_naming_the_field(cluster: Cluster) -> None:
    cluster.create("typo", model={"name": "qwen3-33b"})
    status = cluster.settle("typo")
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert status["message"].startswith("model.name: model 'qwen3-33b': unknown model")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Accepted": "False", "Ready": "False"}
    other = cluster.create("elsewhere", namespace="prod")
    assert other["spec"]["namespace"] == "prod"
    assert "renders into its own namespace 'llm'" in cluster.settle("elsewhere")["message"]


def test_auto_apply_creates_every_rendered_object(cluster: Cluster) -> None:
    cluster.create("chat", auto_apply=True)
    status = cluster.settle("chat")
    assert status["phase"] == "Ready"
    assert applied(cluster.kube) == [("deployments", "qwen3-32b-decode"), ("deployments", "qwen3-32b-prefill"),
                                     ("scaledobjects", "qwen3-32b-decode"), ("scaledobjects", "qwen3-32b-prefill")]
    assert sorted(status["result"]["applied"]) == ["Deployment/qwen3-32b-decode", "Deployment/qwen3-32b-prefill",
                                                   "ScaledObject/qwen3-32b-decode", "ScaledObject/qwen3-32b-prefill"]
    dep = cluster.kube.get_object("apps", "deployments", NS, "qwen3-32b-prefill")
    assert dep is not None and dep["metadata"]["labels"][OWNER_LABEL] == "chat"
    assert dep["spec"]["replicas"] == status["result"]["pools"]["prefill"]["replicas"]


def test_auto_apply_over_an_existing_object_fails_and_leaves_nothing_of_its_own(cluster: Cluster) -> None:
    cluster.kube.create_object({"apiVersion": "apps/v1", "kind": "Deployment",
                                "metadata": {"name": "qwen3-32b-decode", "namespace": NS}, "spec": {"replicas": 7}})
    cluster.create("chat", auto_apply=True)
    status = cluster.settle("chat")
    assert (status["phase"], status["reason"]) == ("Failed", "ApplyFailed")
    assert "qwen3-32b-decode" in status["message"] and "already exists" in status["message"]
    assert applied(cluster.kube) == [("deployments", "qwen3-32b-decode")]  # only the one that was there
    theirs = cluster.kube.get_object("apps", "deployments", NS, "qwen3-32b-decode")
    assert theirs is not None and theirs["spec"] == {"replicas": 7}
    assert ("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/qwen3-32b-prefill") in cluster.kube.writes()


def test_auto_apply_without_the_keda_crd_fails_and_rolls_back(cluster: Cluster, tmp_path: Path) -> None:
    kube = FakeKube().start()
    try:
        install(kube, kinds=("Deployment",))  # KEDA not installed: its ScaledObjects answer 404
        c = Cluster(kube, tmp_path / "other")
        c.create("chat", auto_apply=True)
        status = c.settle("chat")
        assert (status["phase"], status["reason"]) == ("Failed", "ApplyFailed")
        assert "ScaledObject" in status["message"] and "nothing was left applied" in status["message"]
        assert applied(kube) == []
        uid = c.obj("chat")["metadata"]["uid"]
        assert not (tmp_path / "other" / f"k8s-{uid}" / "artifacts").exists()
        c.manager.shutdown()
    finally:
        kube.stop()


def test_deleting_a_running_request_cancels_it(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    with blocking_backend(monkeypatch) as backend:
        uid = cluster.create("chat", auto_apply=True)["metadata"]["uid"]
        cluster.watcher.poll_once()
        assert backend.started.wait(10)
        cluster.kube.delete_object(GROUP, PLURAL, NS, "chat")
        cluster.watcher.poll_once()
        backend.release.set()
        final = cluster.manager.wait(f"k8s-{uid}", 30)
    assert (final.phase.value, final.reason) == ("Failed", "Cancelled")
    assert applied(cluster.kube) == []


def test_a_request_left_profiling_by_a_restart_is_marked_interrupted(cluster: Cluster) -> None:
    cluster.create("chat")
    cluster.kube.custom[(GROUP, PLURAL, NS, "chat")]["status"] = {  # as a profiler that stopped left it
        "phase": "Profiling", "step": "SweepingDecode", "progress": 0.5, "created_at": "2026-01-01T00:00:00Z",
        "observed_generation": 1, "steps": [{"step": "SweepingPrefill", "started_at": "2026-01-01T00:00:01Z",
                                             "finished_at": "2026-01-01T00:01:00Z"},
                                            {"step": "SweepingDecode", "started_at": "2026-01-01T00:01:00Z"}]}
    status = cluster.settle("chat")  # this profiler has never heard of it: its runner is gone
    assert (status["phase"], status["reason"]) == ("Failed", "Interrupted")
    assert [s["step"] for s in status["steps"]] == ["SweepingPrefill", "SweepingDecode"]  # history kept
    assert all(s["finished_at"] for s in status["steps"]) and status["created_at"] == "2026-01-01T00:00:00Z"
    assert cluster.manager.views() == []  # not run again
