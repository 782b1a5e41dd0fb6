"""Property: whatever the sequence of targets and outside changes, the scale actuator converges in one
apply to max(target, floor), and a repeated apply writes nothing."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.actuators.targets import resolve_target
from tests.support.fake_kube import FakeKube

STEPS = st.lists(st.tuples(st.integers(0, 12), st.one_of(st.none(), st.integers(0, 12)), st.integers(0, 2)),
                 min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(floor=st.integers(0, 3), steps=STEPS)
def test_converges_and_is_idempotent(floor: int, steps: list[tuple[int, int | None, int]]) -> None:
    kube = FakeKube().start()
    try:
        kube.add_deployment("ns", "dec", 1)
        act = KubernetesScaleActuator({"decode": resolve_target("decode", "apps/v1", "Deployment", "ns", "dec", floor)},
                                      kube.api_client())
        for target, outside, conflicts in steps:
            if outside is not None:
                kube.set_replicas("deployments", "ns", "dec", outside)
            kube.conflicts_to_inject = conflicts
            before = kube.replicas("deployments", "ns", "dec")
            applied = act.apply({"decode": target})
            want = max(target, floor)
            assert kube.replicas("deployments", "ns", "dec") == want
            assert applied.after == {"decode": want} and applied.changed == (before != want)
            writes = len(kube.writes())
            assert act.apply({"decode": target}).changed is False and len(kube.writes()) == writes
    finally:
        kube.stop()
