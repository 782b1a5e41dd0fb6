"""How `planner run` assembles the service: actuator by kind, leader election wiring, server start-up."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from planner.actuators.desired import PublishActuator
from planner.actuators.dry_run import DryRunActuator
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.process import ProcessActuator
from planner.errors import UserError
from planner.service.leader import LeaseElector
from planner.service.runner import RunOptions, Service, build_loop
from planner.testing.clock import FakeClock
from planner.types import Observation, PoolObservation
from tests.support.fake_kube import FakeKube
from tests.support.process_fixtures import alive, port_range, wait_until

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
    data["metrics"]["selectors"] = {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}
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


def test_lease_timings_reach_the_elector(tmp_path: Path, kube: FakeKube) -> None:
    opts = RunOptions(policy_file(tmp_path, "kubernetes"), leader_elect=True, identity="pod-a", lease_namespace="llm",
                      lease_duration_s=45, renew_deadline_s=40, retry_period_s=5)
    e = build_loop(opts, api_client=kube.api_client()).elector
    assert isinstance(e, LeaseElector)
    assert (e.lease_duration_s, e.renew_deadline_s, e.retry_period_s, e.request_timeout_s) == (45, 40, 5, 5)
    defaults = build_loop(RunOptions(policy_file(tmp_path, "kubernetes"), leader_elect=True, identity="pod-b",
                                     lease_namespace="llm"), api_client=kube.api_client()).elector
    assert isinstance(defaults, LeaseElector)
    assert (defaults.lease_duration_s, defaults.renew_deadline_s, defaults.retry_period_s) == (90, 60, 15)


def test_service_serves_and_stops(tmp_path: Path) -> None:
    service = Service(RunOptions(policy_file(tmp_path, "keda"), host="127.0.0.1", port=0, grpc_port=0)).start()
    try:
        base = service.http.url
        assert httpx.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
        assert httpx.get(f"{base}/readyz", timeout=5).json()["status"] == "starting"
        assert httpx.get(f"{base}/v1/desired", params={"pool": "decode"}, timeout=5).status_code == 503
        service.loop.store.publish({"prefill": 2, "decode": 5})
        assert httpx.get(f"{base}/v1/desired", params={"pool": "decode"}, timeout=5).json() == {
            "desired": 5, "pool": "decode", "policy": "qwen3-32b-chat", "published": True}
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


class StepSource:
    """Light load, then a surge from ``at_s`` on: the planner must scale up."""

    def __init__(self, at_s: float) -> None:
        self.at_s = at_s

    def read(self, window_s: float, now_s: float) -> Observation:
        rate = 2.0 if now_s < self.at_s else 60.0
        pool = PoolObservation(requests=rate * window_s, rate_rps=rate, isl_mean=1200, osl_mean=220,
                               ready_replicas=None)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


@pytest.mark.parametrize("kind", ["kubernetes", "keda", "hpa", "dry-run"])
def test_one_writer_per_output_reports_each_scale_up(tmp_path: Path, kube: FakeKube, kind: str,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Each actuator kind sees the change it makes: ``changed`` on the scale-up tick and the "applied" log.

    (The loop once published to the KEDA store itself before the actuator did, so keda and hpa always
    reported ``changed=False`` and the applied line never fired.)"""
    path = policy_file(tmp_path, kind)
    data = yaml.safe_load(path.read_text())
    data["pools"]["prefill"]["target"]["namespace"] = data["pools"]["decode"]["target"]["namespace"] = "llm"
    path.write_text(yaml.safe_dump(data))
    kube.add_deployment("llm", "qwen-prefill", 1)
    kube.add_deployment("llm", "qwen-decode", 1)
    loop = build_loop(RunOptions(path), clock=FakeClock(start_s=0.0), api_client=kube.api_client())
    loop.source = StepSource(at_s=300.0)
    caplog.set_level(logging.INFO, logger="planner.loop")
    results = []
    for _ in range(20):
        results.append(loop.tick())
        loop.clock.advance(30.0)  # type: ignore[attr-defined]
    first = results[0]
    # The cluster already runs 1 + 1 (nothing to write); the store and the dry-run twin start empty.
    assert first.applied is not None and first.applied.changed is (kind != "kubernetes")
    surge = next(r for r in results if r.at_s >= 300.0 and r.decision is not None
                 and r.decision.targets()["prefill"] > results[0].decision.targets()["prefill"])  # type: ignore[union-attr]
    assert surge.applied is not None and surge.applied.changed is True, surge
    applied_lines = [r.getMessage() for r in caplog.records if r.getMessage().endswith("; applied")]
    assert any(f"prefill={surge.decision.targets()['prefill']} " in m for m in applied_lines), applied_lines  # type: ignore[union-attr]
    steady = results[-1]
    assert steady.applied is not None and steady.applied.changed is False  # idempotent once there
    gauge = loop.metrics.registry.get_sample_value("planner_desired_replicas", {"policy": loop.name, "pool": "prefill"})
    assert gauge == steady.decision.targets()["prefill"]  # type: ignore[union-attr]
    if kind == "kubernetes":
        assert kube.replicas("deployments", "llm", "qwen-prefill") == steady.decision.targets()["prefill"]  # type: ignore[union-attr]
    if kind in ("keda", "hpa"):
        assert loop.store.get("prefill") == steady.decision.targets()["prefill"]  # type: ignore[union-attr]
    else:
        assert loop.store.get("prefill") is None  # KEDA is not in the loop: it is told nothing
    assert loop.decided.get("prefill") == steady.decision.targets()["prefill"]  # /v1/desired: every kind  # type: ignore[union-attr]


def process_policy_file(tmp_path: Path, name: str) -> Path:
    """A policy with kind ``process`` whose engine is a sleeping Python (started, never ready: a process the
    actuator owns and must stop)."""
    data = yaml.safe_load(policy_file(tmp_path, "process").read_text())
    data["name"] = name
    data["actuator"] = {"kind": "process", "state_dir": str(tmp_path / name), "drain_s": 1, "stop_grace_s": 1,
                        "command": [sys.executable, "-c", "import sys, time; time.sleep(300)", "{port}"],
                        "port_range": list(port_range())}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_closing_the_service_stops_every_policys_engines(tmp_path: Path) -> None:
    """Every loop's actuator is closed, not only the first one's: with two process policies, the second
    policy's engines once outlived the controller."""
    first, second = (process_policy_file(tmp_path, n) for n in ("first", "second"))
    service = Service(RunOptions(first, more_policies=(second,), grpc_port=0))
    actuators = [loop.actuator for loop in service.loops]
    assert len(actuators) == 2 and all(isinstance(a, ProcessActuator) for a in actuators)
    try:
        for a in actuators:
            a.apply({})  # each pool starts at its floor: one engine process per pool, two per policy
        engines = {a.settings.policy: [r.proc.pid for r in a.replicas if r.proc is not None] for a in actuators}
        assert all(len(pids) == 2 for pids in engines.values()), engines
        service.close()
        assert {a.settings.policy: a.replicas for a in actuators} == {"first": [], "second": []}
        wait_until(lambda: not any(alive(p) for pids in engines.values() for p in pids), 30, "every engine to end")
    finally:
        for a in actuators:
            a.close(timeout_s=30)  # the test's own cleanup: no engine outlives it whatever the outcome
