"""Lease leader election against the fake API server, and the loop acting only while leading."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from planner.actuators.desired import DesiredStore, PublishActuator
from planner.controller import make_planner_controller
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.leader import LeaseElector
from planner.service.loop import ControlLoop
from planner.telemetry import PlannerMetrics
from planner.testing.actuator import RecordingActuator
from planner.testing.clock import FakeClock
from planner.types import NoData, Observation, PoolObservation
from tests.support.fake_kube import FakeKube

T0 = 1_700_000_000.0


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


def elector(kube: FakeKube, who: str, duration_s: float = 30.0) -> LeaseElector:
    return LeaseElector(kube.api_client(), "planner", "llm", who, duration_s)


def test_one_leader_then_takeover_after_expiry(kube: FakeKube) -> None:
    a, b = elector(kube, "a"), elector(kube, "b")
    steps = [("a", 0), ("b", 1), ("a", 10), ("b", 20), ("b", 39), ("b", 41), ("a", 42), ("a", 70)]
    got = [(who, (a if who == "a" else b).step(T0 + dt)) for who, dt in steps]
    assert got == [("a", True), ("b", False), ("a", True), ("b", False), ("b", False),
                   ("b", True), ("a", False), ("a", False)]
    spec = kube.leases[("llm", "planner")]["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("b", 1, 30)


def test_release_hands_over_at_once(kube: FakeKube) -> None:
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.step(T0) and not b.step(T0 + 1)
    a.release(T0 + 2)
    assert b.step(T0 + 3) and not a.is_leader


def test_api_errors_keep_leadership_only_within_the_lease(kube: FakeKube) -> None:
    a = elector(kube, "a")
    assert a.step(T0)
    kube.forbidden.add(("leases", "get"))
    assert a.step(T0 + 10) is True  # still inside the lease it last renewed
    assert a.step(T0 + 31) is False  # the lease may have gone to someone else by now


def test_forbidden_create_is_not_leader(kube: FakeKube) -> None:
    kube.forbidden.add(("leases", "create"))
    assert elector(kube, "a").step(T0) is False


def test_concurrent_writer_loses_on_conflict(kube: FakeKube) -> None:
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.step(T0)
    # b reads the expired lease, but a renews between b's read and b's write: b's write must fail.
    original = b.api.read_namespaced_lease

    def read_then_race(name: str, namespace: str, **kwargs):  # noqa: ANN202, ANN003
        lease = original(name, namespace, **kwargs)
        a.step(T0 + 40)
        return lease

    b.api.read_namespaced_lease = read_then_race  # type: ignore[method-assign]
    assert b.step(T0 + 40) is False
    assert b.problem is None  # losing a race is standby, not a problem
    assert kube.leases[("llm", "planner")]["spec"]["holderIdentity"] == "a"


class Steady:
    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        pool = PoolObservation(requests=60, rate_rps=1.0, isl_mean=1000, osl_mean=200, ttft_ms_p95=200,
                               itl_ms_p95=10, ready_replicas=1)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


def test_standby_neither_actuates_nor_publishes(kube: FakeKube, repo) -> None:  # noqa: ANN001
    policy = parse_policy({"name": "p", "profile": str(repo / "profiles/h200/qwen3-8b.json"),
                           "pools": {"prefill": {}, "decode": {}}, "actuator": {"kind": "keda"}})
    profile = load_profile(policy.profile)
    clock = FakeClock(T0)
    loops = {}
    for who in ("a", "b"):
        store = DesiredStore(policy.name, policy.pool_names())
        loops[who] = ControlLoop(policy, make_planner_controller(policy, profile), Steady(),
                                 RecordingActuator(inner=PublishActuator(store, "keda")), PlannerMetrics(), clock,
                                 store=store, elector=elector(kube, who, 90.0))
    for _ in range(3):
        ra, rb = loops["a"].tick(), loops["b"].tick()
        clock.advance(30)
    assert (ra.leader, rb.leader) == (True, False)
    assert loops["a"].actuator.calls and loops["b"].actuator.calls == []
    assert loops["b"].store.get("decode") is None and loops["a"].store.get("decode") == ra.decision.targets()["decode"]
    gauge = {who: loop.metrics.registry.get_sample_value("planner_desired_replicas", {"policy": "p", "pool": "decode"})
             for who, loop in loops.items()}
    assert gauge == {"a": ra.decision.targets()["decode"], "b": None}
    assert rb.decision is not None  # the standby keeps its controller warm for a takeover


def test_lease_times_always_carry_microseconds(kube: FakeKube) -> None:
    a = elector(kube, "a")
    assert a.step(1_700_000_000.0)  # a whole second: isoformat() would drop the fraction
    renew = kube.leases[("llm", "planner")]["spec"]["renewTime"]
    assert renew.startswith("2023-11-14T22:13:20.") and len(renew.split(".")[1].split("+")[0]) == 6


def test_the_leader_gauge_drops_when_the_renew_deadline_passes_not_at_the_next_tick(kube: FakeKube,
                                                                                   repo) -> None:  # noqa: ANN001
    """planner_leader is read when scraped, by the local clock: cut off after its last renewal, a leader
    says 0 once its renew deadline has passed, with no tick in between (two replicas said 1 for seconds)."""
    policy = parse_policy({"name": "p", "profile": str(repo / "profiles/h200/qwen3-8b.json"),
                           "pools": {"prefill": {}, "decode": {}}, "actuator": {"kind": "keda"}})
    clock = FakeClock(T0)
    store = DesiredStore(policy.name, policy.pool_names())
    lease = LeaseElector(kube.api_client(), "planner", "llm", "a", 30.0, clock=clock.now_s, renew_deadline_s=20.0)
    loop = ControlLoop(policy, make_planner_controller(policy, load_profile(policy.profile)), Steady(),
                       PublishActuator(store, "keda"), PlannerMetrics(), clock, store=store, elector=lease)

    def gauge() -> float | None:
        return loop.metrics.registry.get_sample_value("planner_leader", {"policy": "p"})

    assert gauge() == 0  # not stepped yet: not leading
    assert loop.tick().leader
    for after_s, expected in ((10.0, 1.0), (19.5, 1.0), (20.0, 0.0), (29.0, 0.0)):
        clock.advance(T0 + after_s - clock.now_s())
        assert gauge() == expected, after_s
    assert loop.ticks == 1  # no tick ran while the gauge changed
