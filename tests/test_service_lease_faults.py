"""Leader election under faults found against a real API server: hangs, split brain, a lease never taken.

- An API server that accepts connections and never answers hung the loop for 104 s (no log, SIGTERM
  ignored): every Lease call now carries a timeout well inside the lease.
- The old leader judged leadership by the tick's start time, so after a long failed call it still believed
  it led and wrote 7 -> 3 after the new leader had taken over: leadership is judged by the clock after the
  call, and re-checked right before every write.
- With no RBAC on leases the service stood by forever behind a 200 /healthz, `--once` exited 0: now the
  problem is logged once with the RBAC hint, counted each tick, exported (planner_leader), fails readiness,
  and `--once` exits non-zero.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.controller import make_planner_controller
from planner.profile import load_profile
from planner.service.background import BackgroundServer
from planner.service.leader import LeaseElector
from planner.service.loop import ControlLoop
from planner.service.runner import create_service_app
from planner.telemetry import PlannerMetrics
from planner.testing.clock import FakeClock
from planner.types import Observation, PoolObservation
from tests.support.fake_kube import FakeKube
from tests.test_service_restart import NS, PROFILE, Quiet, policy

T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


def sample(metrics: PlannerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_hung_api_server_costs_one_timeout_not_the_lease(kube: FakeKube) -> None:
    clock = FakeClock(T0)
    a = LeaseElector(kube.api_client(retries=0), "planner", NS, "a", 5.0, clock=clock.now_s)
    assert a.request_timeout_s == 1.0  # a fifth of the lease
    assert a.step(T0)
    kube.inject(path="/leases", delay_s=30.0)  # accepts, never answers in time
    started = time.monotonic()
    assert a.step(T0 + 2) is True  # still inside the lease it renewed at T0 (and past a third of it)
    assert time.monotonic() - started < 3.0
    assert a.problem is not None and "cannot reach the API server" in a.problem


def test_a_leader_whose_call_outlived_the_lease_no_longer_leads(kube: FakeKube) -> None:
    """The call started inside the lease but failed 104 s later: judged by the clock then, not at the start."""
    clock = FakeClock(T0)
    a = LeaseElector(kube.api_client(), "planner", NS, "a", 15.0, clock=clock.now_s)
    assert a.step(T0)
    kube.inject(path="/leases", status=500, hook=lambda: clock.advance(104.0))
    assert a.step(T0 + 10) is False
    assert a.may_write() is not None


def test_old_leader_never_writes_after_the_new_one_took_over(kube: FakeKube) -> None:
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    clock = FakeClock(T0)
    pol = policy()
    metrics = PlannerMetrics()
    elector = LeaseElector(kube.api_client(), "planner", NS, "old", 15.0, clock=clock.now_s)
    act = KubernetesScaleActuator.from_policy(pol, kube.api_client(), may_write=elector.may_write)

    class SlowRead(Quiet):  # a surge, read by a metrics call that stalls past the lease before the write
        def read(self, window_s, now_s):  # noqa: ANN001, ANN201
            clock.advance(20.0)
            pool = PoolObservation(requests=3000, rate_rps=50, isl_mean=2000, osl_mean=300, ready_replicas=1)
            return Observation(now_s, window_s, {"prefill": pool, "decode": pool})

    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), SlowRead(), act,
                       metrics, clock, elector=elector)
    result = loop.tick()
    assert result.decision is not None and result.decision.targets()["prefill"] > 1  # it wanted to write
    assert result.error is not None and result.error.startswith("leader:") and "another candidate" in result.error
    assert kube.scale_writes() == [] and replicas_of(kube) == (1, 1)
    assert sample(metrics, "planner_errors_total", policy="restart", kind="leader") == 1


def replicas_of(kube: FakeKube) -> tuple[int, int]:
    return kube.replicas("deployments", NS, "pre"), kube.replicas("deployments", NS, "dec")


def test_a_lease_that_can_never_be_taken_is_said_counted_and_not_ready(kube: FakeKube,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    kube.forbidden |= {("leases", "get"), ("leases", "create")}
    kube.add_deployment(NS, "pre", 2)
    kube.add_deployment(NS, "dec", 2)
    clock = FakeClock(T0)
    pol = policy()
    metrics = PlannerMetrics()
    elector = LeaseElector(kube.api_client(), "planner", NS, "a", 90.0, clock=clock.now_s)
    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Quiet(),
                       KubernetesScaleActuator.from_policy(pol, kube.api_client(), may_write=elector.may_write),
                       metrics, clock, elector=elector)
    caplog.set_level(logging.INFO)
    for _ in range(3):
        result = loop.tick()
        clock.advance(30)
    assert not result.leader and result.error is not None and "deploy/components/leader-election" in result.error
    said = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(said) == 1 and "forbidden (403)" in said[0].getMessage()  # once, with the hint
    assert sample(metrics, "planner_errors_total", policy="restart", kind="leader") == 3  # every tick
    assert sample(metrics, "planner_leader", policy="restart") == 0
    assert sample(metrics, "planner_ready", policy="restart") == 0
    with BackgroundServer(create_service_app(loop)) as server:
        r = httpx.get(f"{server.url}/readyz", timeout=5)
    assert r.status_code == 503 and "forbidden" in r.json()["problems"]["lease"]
    assert kube.scale_writes() == []


def kubeconfig(tmp_path: Path, kube: FakeKube) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "fake", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": NS}}]}))
    return path


def test_once_exits_non_zero_when_the_lease_cannot_be_taken(tmp_path: Path, kube: FakeKube,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    from planner.cli import run

    kube.forbidden |= {("leases", "get"), ("leases", "create")}
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, kube)))
    data = yaml.safe_load((REPO / "policies" / "example.yaml").read_text())
    data.update(profile=str(PROFILE), actuator={"kind": "keda"})
    data["metrics"]["selectors"] = {"prefill": '{pool="prefill"}', "decode": '{pool="decode"}'}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    rc = run(["run", "--policy", str(path), "--once", "--leader-elect", "--lease-namespace", NS,
              "--metrics-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert rc == 1 and "not applied" in err, err
    assert "not applied" in err and "forbidden" in err and "leader-election" in err


def test_one_elector_shared_by_the_loops_of_several_policies(kube: FakeKube) -> None:
    """`planner run --policy A --policy B`: two loop threads step one elector; neither may lose to the other."""
    import threading

    clock = FakeClock(T0)
    shared = LeaseElector(kube.api_client(), "planner", NS, "pod-a", 90.0, clock=clock.now_s)
    got: list[bool] = []

    def loop_thread() -> None:
        for k in range(20):
            got.append(shared.step(T0 + k * 10))

    threads = [threading.Thread(target=loop_thread) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [True] * 40 and shared.problem is None
