"""A restart or a failover is not a scale-down: the controller is seeded from what the targets hold.

Found against a real API server: a fresh controller took "current" from the ready replicas Prometheus saw
(fewer than the Deployment's spec.replicas while pods are pending or loading a model) and started with an
empty scale-down window, so Deployments at 5 went 5 -> 1 on its first tick, and a new leader after a
failover wrote 3 -> 2 at once. Seeded, each pool starts at spec.replicas with a full scale-down window:
nothing goes below it before ``stabilization_window_s`` has passed, and then only as fast as the rate
policy allows. The actuator is the real one, through the official client, against tests/support/fake_kube.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.actuators.desired import DesiredStore, PublishActuator
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.controller import make_planner_controller
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.leader import LeaseElector
from planner.service.loop import ControlLoop
from planner.telemetry import PlannerMetrics
from planner.testing.clock import FakeClock
from planner.types import NoData, Observation, PoolObservation
from tests.support.fake_kube import FakeKube

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"
NS = "llm"
T0 = 1_700_000_000.0
WINDOW_S = 300


def policy(kind: str = "kubernetes"):  # noqa: ANN201
    return parse_policy({
        "name": "restart", "profile": str(PROFILE), "interval_s": 30, "startup_s": 60,
        "pools": {"prefill": {"target": {"name": "pre", "namespace": NS}, "min_replicas": 1, "max_replicas": 16},
                  "decode": {"target": {"name": "dec", "namespace": NS}, "min_replicas": 1, "max_replicas": 16}},
        "forecast": {"model": "last-value"}, "actuator": {"kind": kind},
        "behavior": {"scale_down": {"stabilization_window_s": WINDOW_S,
                                    "policies": [{"type": "pods", "value": 1, "period_s": 60}]}}})


class Quiet:
    """Light load on pools whose pods are mostly not ready yet (pending GPU pods, models loading)."""

    def __init__(self, ready: int = 2) -> None:
        self.ready = ready

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        pool = PoolObservation(requests=6, rate_rps=0.1, isl_mean=500, osl_mean=100, ttft_ms_p95=100,
                               itl_ms_p95=10, ready_replicas=self.ready)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


def make_loop(kube: FakeKube, clock: FakeClock, elector: LeaseElector | None = None,
              metrics: PlannerMetrics | None = None) -> ControlLoop:
    pol = policy()
    act = KubernetesScaleActuator.from_policy(pol, kube.api_client(),
                                              may_write=elector.may_write if elector else None)
    return ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Quiet(), act,
                       metrics or PlannerMetrics(), clock, elector=elector)


def replicas(kube: FakeKube) -> dict[str, int]:
    return {"prefill": kube.replicas("deployments", NS, "pre"), "decode": kube.replicas("deployments", NS, "dec")}


def run_for(loop: ControlLoop, clock: FakeClock, seconds: float, kube: FakeKube) -> list[tuple[float, dict]]:
    """Tick every interval for ``seconds``; returns (seconds since start, replicas after the tick)."""
    start = clock.now_s()
    out = []
    while clock.now_s() - start < seconds:
        loop.tick()
        out.append((clock.now_s() - start, replicas(kube)))
        clock.advance(loop.interval_s)
    return out


def assert_no_early_or_fast_scale_down(history: list[tuple[float, dict]], start: dict[str, int]) -> None:
    for at_s, now in history:
        for pool, n in now.items():
            assert 1 <= n <= 16  # floor and ceiling
            if at_s < WINDOW_S:
                assert n >= start[pool], f"{pool} {start[pool]} -> {n} at +{at_s:.0f}s, inside the window"
            else:  # then one replica per 60 s at most (the rate policy)
                assert n >= start[pool] - (1 + int((at_s - WINDOW_S) // 60)), (pool, at_s, n)


def test_restart_with_pending_pods_does_not_scale_down(kube: FakeKube) -> None:
    kube.add_deployment(NS, "pre", 5)
    kube.add_deployment(NS, "dec", 5)
    clock = FakeClock(T0)
    history = run_for(make_loop(kube, clock), clock, 600, kube)
    assert history[0][1] == {"prefill": 5, "decode": 5}  # was 5 -> 1 on the first tick
    assert_no_early_or_fast_scale_down(history, {"prefill": 5, "decode": 5})
    assert history[-1][1]["decode"] < 5  # the load is light: the window passed, it does scale down


def test_a_restart_between_decide_and_apply_is_seeded_again(kube: FakeKube) -> None:
    """The controller is killed mid-way (its decision lost); the new one reads spec.replicas again."""
    kube.add_deployment(NS, "pre", 4)
    kube.add_deployment(NS, "dec", 4)
    clock = FakeClock(T0)
    first = make_loop(kube, clock)
    run_for(first, clock, 90, kube)
    assert replicas(kube) == {"prefill": 4, "decode": 4}
    history = run_for(make_loop(kube, clock), clock, 600, kube)  # a new process, nothing carried over
    assert_no_early_or_fast_scale_down(history, {"prefill": 4, "decode": 4})


def test_failover_seeds_the_new_leader(kube: FakeKube) -> None:
    """The standby decided for minutes without acting: on takeover it starts from what the targets hold."""
    kube.add_deployment(NS, "pre", 3)
    kube.add_deployment(NS, "dec", 3)
    clock = FakeClock(T0)
    a = make_loop(kube, clock, LeaseElector(kube.api_client(), "planner", NS, "a", 90, clock=clock.now_s))
    b = make_loop(kube, clock, LeaseElector(kube.api_client(), "planner", NS, "b", 90, clock=clock.now_s))
    for _ in range(8):  # a leads and holds 3 (its window); b stands by, its own history says "1"
        a.tick()
        b.tick()
        clock.advance(30)
    assert b.last is not None and not b.last.leader and b.last.decision is not None
    assert b.last.decision.targets()["decode"] < 3  # what b would write if it took over unseeded
    start = clock.now_s()
    history = []
    while clock.now_s() - start < 600:  # a is dead; b takes over once the lease expires
        b.tick()
        history.append((clock.now_s() - start, replicas(kube), b.last.leader))  # type: ignore[union-attr]
        clock.advance(30)
    took_over = next(at for at, _, leader in history if leader)
    assert took_over <= 90  # within the lease
    assert_no_early_or_fast_scale_down([(at - took_over, r) for at, r, _ in history if at >= took_over],
                                       {"prefill": 3, "decode": 3})


def test_seed_read_failure_applies_nothing_until_it_can_read(kube: FakeKube) -> None:
    kube.add_deployment(NS, "pre", 5)
    kube.add_deployment(NS, "dec", 5)
    clock = FakeClock(T0)
    metrics = PlannerMetrics()
    loop = make_loop(kube, clock, metrics=metrics)
    fault = kube.inject("GET", r"/scale$", status=503, times=2)  # the API server fails for two ticks
    results = []
    for _ in range(2):
        results.append(loop.tick())
        clock.advance(30)
    assert all(r.error and r.error.startswith("seed:") for r in results) and fault.fired == 2
    assert kube.scale_writes() == []
    assert metrics.registry.get_sample_value("planner_errors_total", {"policy": "restart", "kind": "seed"}) == 2
    history = run_for(loop, clock, 300, kube)
    assert_no_early_or_fast_scale_down(history, {"prefill": 5, "decode": 5})


def test_keda_without_credentials_seeds_from_ready_replicas_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    pol = policy("keda")
    store = DesiredStore(pol.name, pol.pool_names())
    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Quiet(ready=4),
                       PublishActuator(store, "keda"), PlannerMetrics(), FakeClock(T0))
    caplog.set_level(logging.INFO, logger="planner.loop")
    published = []
    for _ in range(12):
        loop.tick()
        published.append(store.get("decode"))
        loop.clock.advance(30)  # type: ignore[attr-defined]
    assert published[:WINDOW_S // 30] == [4] * (WINDOW_S // 30)  # held at what runs for the whole window
    said = [r.getMessage() for r in caplog.records if "cannot read the targets' spec.replicas" in r.getMessage()]
    assert len(said) == 1 and "seeding from the ready replicas" in said[0]


def test_keda_with_credentials_seeds_from_what_keda_set(kube: FakeKube) -> None:
    """KEDA/the HPA write the same spec.replicas: with credentials the planner reads it like the actuator."""
    from planner.actuators.factory import make_actuator

    kube.add_deployment(NS, "pre", 6)
    kube.add_deployment(NS, "dec", 6)
    pol = policy("keda")
    store = DesiredStore(pol.name, pol.pool_names())
    act = make_actuator(pol, pol.actuator, store, api_client=kube.api_client())
    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Quiet(ready=2), act,
                       PlannerMetrics(), FakeClock(T0), store=store)
    loop.tick()
    assert store.snapshot().replicas == {"prefill": 6, "decode": 6}  # not 2 (ready), not 1 (the load)
    assert kube.scale_writes() == []  # read, never written: KEDA writes
