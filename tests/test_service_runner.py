"""How `planner run` assembles the service: actuator by kind, leader election wiring, server start-up."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from fake_kube import FakeKube

from planner.actuators.desired import PublishActuator
from planner.actuators.dry_run import DryRunActuator
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.errors import UserError
from planner.service.leader import LeaseElector
from planner.service.runner import RunOptions, Service, build_loop

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


def policy_file(tmp_path: Path, kind: str) -> Path:
    data = yaml.safe_load((REPO / "policies" / "example.yaml").read_text())
    data["profile"] = str(REPO / "profiles" / "h200" / "qwen3-32b.json")
    data["actuator"] = {"kind": kind}
    data["metrics"]["url"] = "http://127.0.0.1:9"
    data["metrics"]["timeout_s"] = 1
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("kind,dry,expected", [
    ("kubernetes", False, KubernetesScaleActuator), ("kubernetes", True, DryRunActuator),
    ("keda", False, PublishActuator), ("hpa", False, PublishActuator), ("dry-run", False, DryRunActuator),
], ids=["kubernetes", "dry-run-flag", "keda", "hpa", "dry-run-kind"])
def test_actuator_by_kind(tmp_path: Path, kube: FakeKube, kind: str, dry: bool, expected: type) -> None:
    loop = build_loop(RunOptions(policy_file(tmp_path, kind), dry_run=dry), api_client=kube.api_client())
    assert type(loop.actuator) is expected and loop.elector is None


def test_leader_election_wiring(tmp_path: Path, kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "serving")
    opts = RunOptions(policy_file(tmp_path, "kubernetes"), leader_elect=True, identity="pod-a")
    loop = build_loop(opts, api_client=kube.api_client())
    assert isinstance(loop.elector, LeaseElector)
    assert (loop.elector.namespace, loop.elector.identity, loop.elector.lease_duration_s) == ("serving", "pod-a", 90.0)
    result = loop.tick()
    assert result.leader is True
    assert kube.leases[("serving", "planner")]["spec"]["holderIdentity"] == "pod-a"


def test_service_serves_and_stops(tmp_path: Path) -> None:
    service = Service(RunOptions(policy_file(tmp_path, "keda"), host="127.0.0.1", port=0, grpc_port=0)).start()
    try:
        base = service.http.url
        assert httpx.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
        assert httpx.get(f"{base}/readyz", timeout=5).json()["status"] == "starting"
        assert httpx.get(f"{base}/v1/desired", params={"pool": "decode"}, timeout=5).status_code == 503
        service.loop.store.publish({"prefill": 2, "decode": 5})
        assert httpx.get(f"{base}/v1/desired", params={"pool": "decode"}, timeout=5).json() == {
            "desired": 5, "pool": "decode", "policy": "qwen3-32b-chat"}
    finally:
        service.close()
    assert service.http is None and service.grpc is None


def test_busy_grpc_port_is_a_user_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        service = Service(RunOptions(policy_file(tmp_path, "keda"), host="127.0.0.1", port=0, grpc_port=port))
        with pytest.raises(UserError, match=f"grpc_port {port}: cannot start the external scaler"):
            service.start()
    assert service.http is None  # the HTTP server was stopped again
