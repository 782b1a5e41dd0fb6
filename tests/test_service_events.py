"""What the operator sees of each scale: Kubernetes Events on the target, write conflicts counted, and a
concurrent writer's replicas not overwritten. Real actuator and client against tests/support/fake_kube.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.targets import targets_from_policy
from planner.controller import make_planner_controller
from planner.profile import load_profile
from planner.service.events import ScaleEvents, camel
from planner.service.loop import ControlLoop
from planner.telemetry import PlannerMetrics
from planner.testing.clock import FakeClock
from planner.types import Observation, PoolObservation
from tests.support.fake_kube import FakeKube
from tests.test_service_restart import NS, PROFILE, T0, policy


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


class Load:
    def __init__(self, rate_rps: float) -> None:
        self.rate_rps = rate_rps

    def read(self, window_s: float, now_s: float) -> Observation:
        pool = PoolObservation(requests=self.rate_rps * window_s, rate_rps=self.rate_rps, isl_mean=2000,
                               osl_mean=300, ready_replicas=1)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


def loop_for(kube: FakeKube, rate_rps: float, metrics: PlannerMetrics) -> ControlLoop:
    pol = policy()
    api = kube.api_client()
    act = KubernetesScaleActuator.from_policy(pol, api, on_conflict=lambda pool: metrics.actuation_conflicts.labels(
        policy=pol.name, pool=pool).inc())
    return ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Load(rate_rps), act, metrics,
                       FakeClock(T0), events=ScaleEvents(api, targets_from_policy(pol, pol.actuator.kind), pol.name, instance="pod-a"))


def sample(metrics: PlannerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_each_scale_is_an_event_on_its_target(kube: FakeKube) -> None:
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    metrics = PlannerMetrics()
    result = loop_for(kube, 40.0, metrics).tick()
    assert result.applied is not None and result.applied.changed
    moved = {p for p, n in result.decision.targets().items() if n != 1}  # type: ignore[union-attr]
    assert moved and len(kube.events) == len(moved)
    for event in kube.events:
        obj = event["involvedObject"]
        pool = "prefill" if obj["name"] == "pre" else "decode"
        d = result.decision.pools[pool]  # type: ignore[union-attr]
        assert (obj["kind"], obj["apiVersion"], obj["namespace"]) == ("Deployment", "apps/v1", NS)
        assert event["reason"] == ",".join(camel(r.value) for r in d.reasons) and event["type"] == "Normal"
        assert f"pool {pool} 1 -> {d.replicas} replicas" in event["message"]
        assert event["reportingComponent"] == "planner" and event["reportingInstance"] == "pod-a"


def test_events_forbidden_never_block_scaling(kube: FakeKube, caplog: pytest.LogCaptureFixture) -> None:
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    kube.forbidden.add(("events", "create"))
    metrics = PlannerMetrics()
    loop = loop_for(kube, 40.0, metrics)
    caplog.set_level(logging.WARNING, logger="planner.events")
    loop.tick()
    loop.source = Load(80.0)
    loop.clock.advance(30)  # type: ignore[attr-defined]
    loop.tick()
    assert kube.replicas("deployments", NS, "dec") > 1 and kube.events == []
    assert sample(metrics, "planner_errors_total", policy="restart", kind="event") >= 2
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and 'resources: ["events"], verbs: ["create"]' in warned[0]  # once, with the rule


def test_conflict_with_unchanged_replicas_is_counted_and_written_again(kube: FakeKube,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    kube.conflicts_to_inject = 2  # a status update lands between each read and write: only the version moves
    metrics = PlannerMetrics()
    caplog.set_level(logging.INFO, logger="planner.actuators")
    result = loop_for(kube, 40.0, metrics).tick()
    assert result.error is None and kube.replicas("deployments", NS, "pre") == result.decision.targets()["prefill"]  # type: ignore[union-attr]
    assert sample(metrics, "planner_actuation_conflicts_total", policy="restart", pool="prefill") == 2
    said = [r.getMessage() for r in caplog.records if "conflict" in r.getMessage()]
    assert len(said) == 1 and "2 write conflicts (409), re-read and written again" in said[0]


@pytest.mark.parametrize("theirs,floor_after", [(8, 8), (0, 1)], ids=["scaled-up-by-kubectl", "below-floor"])
def test_a_concurrent_writer_is_not_overwritten_and_the_next_tick_decides_from_it(
        kube: FakeKube, theirs: int, floor_after: int) -> None:
    kube.add_deployment(NS, "pre", 3)
    kube.add_deployment(NS, "dec", 3)
    metrics = PlannerMetrics()
    loop = loop_for(kube, 0.05, metrics)  # light load: the planner would like fewer
    for _ in range(11):  # past the window: it starts scaling down, one replica a minute
        loop.tick()
        loop.clock.advance(30)  # type: ignore[attr-defined]
    assert kube.replicas("deployments", NS, "dec") < 3
    fault = kube.inject("PUT", r"/dec/scale$", status=409, times=1,
                        hook=lambda: kube.set_replicas("deployments", NS, "dec", theirs))
    for _ in range(10):  # until the planner's next decode write meets the other writer
        loop.tick()
        loop.clock.advance(30)  # type: ignore[attr-defined]
        if fault.fired:
            break
    assert fault.fired == 1
    assert kube.replicas("deployments", NS, "dec") == theirs  # theirs stands
    assert sample(metrics, "planner_actuation_conflicts_total", policy="restart", pool="decode") == 1
    loop.tick()  # re-seeded from what is there: held at theirs (within the window), or raised to the floor
    assert kube.replicas("deployments", NS, "dec") == floor_after
