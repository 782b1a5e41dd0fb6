"""The control loop against the simulated cluster (sim MetricSource + Actuator) and the fake API server.

Time is a FakeClock that the loop's ``wait`` advances together with the simulator, so twenty minutes of
control pass in well under a second of wall time, deterministically.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.actuators.errors import ActuationError
from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.controller import make_planner_controller
from planner.decide import PlannerState
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.loop import ControlLoop, TickResult
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.cluster.metrics import SimActuator, SimMetricSource
from planner.sim.traces import synthetic
from planner.sim.traces.records import RequestTrace
from planner.telemetry import PlannerMetrics
from planner.testing.actuator import RecordingActuator, UnreadableActuator
from planner.testing.clock import FakeClock
from planner.types import Applied, NoData, NoDataReason, Observation, Reason
from tests.support.fake_kube import FakeKube

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"
NS = "llm"


def policy(**over: object):  # noqa: ANN201
    data = {"name": "e2e", "profile": str(PROFILE), "interval_s": 30, "startup_s": 60,
            "pools": {"prefill": {"target": {"name": "pre", "namespace": NS}, "max_replicas": 16},
                      "decode": {"target": {"name": "dec", "namespace": NS}, "max_replicas": 16}},
            "metrics": {"source": "sim", "window_s": 60}, "forecast": {"model": "last-value"},
            "behavior": {"scale_down": {"stabilization_window_s": 60}}}
    data.update(over)
    return parse_policy(data)


class SimHarness:
    """A simulated cluster driven by the loop's clock: waiting advances the simulation."""

    def __init__(self, trace: RequestTrace, pol) -> None:  # noqa: ANN001
        self.policy = pol
        self.profile = load_profile(PROFILE)
        self.cluster = Cluster(trace, self.profile, SimConfig(startup_s=pol.startup_s), {"prefill": 1, "decode": 1})
        self.clock = FakeClock(start_s=0.0)
        self.source = SimMetricSource(self.cluster)
        self.metrics = PlannerMetrics()

    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.cluster.run_until(self.clock.now_s())

    def loop(self, actuator, source=None, **kw: object) -> ControlLoop:  # noqa: ANN001
        controller = make_planner_controller(self.policy, self.profile)
        return ControlLoop(self.policy, controller, source or self.source, actuator, self.metrics, self.clock, **kw)

    def run(self, loop: ControlLoop, until_s: float) -> list[TickResult]:
        out: list[TickResult] = []
        self.wait(self.policy.interval_s)  # the initial sizes hold for the first interval

        def wait(s: float) -> None:
            out.append(loop.last)  # type: ignore[arg-type]
            self.wait(s)

        loop.run(max_ticks=int(until_s // self.policy.interval_s), wait=wait)
        out.append(loop.last)  # type: ignore[arg-type]
        return out

    def errors(self, kind: str) -> float:
        return self.metrics.registry.get_sample_value("planner_errors_total", {"policy": "e2e", "kind": kind}) or 0.0


def step_trace() -> RequestTrace:
    return synthetic.step(2.0, 30.0, at_s=300.0, duration_s=900.0, isl=2000, osl=300, seed=1)


def test_load_up_scales_up_through_the_sim() -> None:
    h = SimHarness(step_trace(), policy())
    ticks = h.run(h.loop(UnreadableActuator(SimActuator(h.cluster))), until_s=840)
    # The first tick has less than one metrics window behind it: NoData, and with no history nothing to hold.
    assert ticks[0].decision.targets() == {} and NoData.__name__ == type(ticks[0].observation).__name__
    early = [t.decision.targets() for t in ticks[1:] if t.at_s <= 270]
    late = [t.decision.targets() for t in ticks if t.at_s >= 600]
    assert max(d["decode"] + d["prefill"] for d in early) <= 3
    assert min(d["decode"] for d in late) > max(d["decode"] for d in early)
    assert h.cluster.active("decode") == late[-1]["decode"]
    assert all(t.error is None for t in ticks)
    assert h.metrics.registry.get_sample_value("planner_desired_replicas", {"policy": "e2e", "pool": "decode"}) \
        == late[-1]["decode"]


class Outage:
    """Wraps a source: NoData while ``down(now_s)``."""

    def __init__(self, inner, down) -> None:  # noqa: ANN001
        self.inner, self.down = inner, down

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        if self.down(now_s):
            return NoData(NoDataReason.UNREACHABLE, "prometheus down", now_s)
        return self.inner.read(window_s, now_s)


def test_missing_metrics_never_scale_down() -> None:
    # High load, then the load stops *and* the metrics vanish: the pools must hold, not shrink to the floor.
    trace = synthetic.step(30.0, 0.0, at_s=400.0, duration_s=400.0, isl=2000, osl=300, seed=2)
    h = SimHarness(trace, policy())
    source = Outage(h.source, lambda t: t >= 420)
    ticks = h.run(h.loop(UnreadableActuator(SimActuator(h.cluster)), source=source), until_s=900)
    before = next(t for t in reversed(ticks) if t.at_s < 420).decision.targets()
    during = [t for t in ticks if t.at_s >= 420]
    assert before["decode"] > 1
    assert all(t.decision.targets() == before for t in during)
    assert all(Reason.NO_DATA_HOLD in t.decision.reasons for t in during)
    assert h.errors("no_data_unreachable") == len(during)


def test_readiness_degrades_after_stale_intervals() -> None:
    h = SimHarness(step_trace(), policy())
    loop = h.loop(RecordingActuator(), source=Outage(h.source, lambda t: t >= 200))
    h.run(loop, until_s=360)
    status = loop.monitor.status()
    assert status is not None and not status.ready and "decode/rate" in status.missing
    assert h.metrics.registry.get_sample_value("planner_ready", {"policy": "e2e"}) == 0


def test_actuation_errors_are_counted_and_retried() -> None:
    h = SimHarness(step_trace(), policy())
    act = RecordingActuator({"prefill": 1, "decode": 1})
    act.fail_next = 3
    act.error = ActuationError("Deployment llm/dec: forbidden")
    ticks = h.run(h.loop(act), until_s=300)
    assert [t.error for t in ticks[:3]] == ["actuate: Deployment llm/dec: forbidden"] * 3
    assert all(t.error is None for t in ticks[3:]) and len(ticks) == 10
    assert h.errors("actuate") == 3
    assert act.current == ticks[-1].decision.targets()


class Boom:
    name, interval_s = "boom", 30.0
    last_forecast = None
    state = PlannerState()

    def tick(self, observation, now_s):  # noqa: ANN001, ANN201
        raise ZeroDivisionError("bug")


def test_decide_errors_do_not_stop_the_loop() -> None:
    h = SimHarness(step_trace(), policy())
    act = RecordingActuator()
    loop = ControlLoop(h.policy, Boom(), h.source, act, h.metrics, h.clock)
    ticks = h.run(loop, until_s=120)
    assert [t.error for t in ticks] == ["decide: bug"] * 4 and act.calls == []
    assert h.errors("decide") == 4


def test_overrun_skips_missed_grid_points() -> None:
    clock = FakeClock(start_s=1000.0)
    pol = policy()

    class Slow(RecordingActuator):
        def apply(self, targets):  # noqa: ANN001, ANN201
            clock.advance(70.0)  # this tick took more than two intervals
            return super().apply(targets)

    class Flat:
        def read(self, window_s: float, now_s: float) -> NoData:
            return NoData(NoDataReason.EMPTY, "x", now_s)

    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), Flat(), Slow(), PlannerMetrics(),
                       clock)
    starts: list[float] = []
    orig = loop.tick

    def tick() -> TickResult:
        starts.append(clock.now_s())
        return orig()

    loop.tick = tick  # type: ignore[method-assign]
    loop.run(max_ticks=3, wait=clock.advance)
    assert starts == [1000.0, 1090.0, 1180.0]  # grid 1000+30k; 1030 and 1060 were skipped


# ------------------------------------------------------------------------------------------ fake API server
@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    yield k
    k.stop()


class DeploymentController:
    """What kube-controller-manager does: make the sim's pods follow the Deployments' spec.replicas."""

    def __init__(self, kube: FakeKube, actuator: KubernetesScaleActuator, sim: SimActuator) -> None:
        self.kube, self.actuator, self.sim = kube, actuator, sim

    def apply(self, targets) -> Applied:  # noqa: ANN001
        applied = self.actuator.apply(targets)
        self.sim.apply({"prefill": self.kube.replicas("deployments", NS, "pre"),
                        "decode": self.kube.replicas("deployments", NS, "dec")})
        return applied


def test_load_up_scales_the_fake_deployments(kube: FakeKube) -> None:
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    h = SimHarness(step_trace(), policy())
    k8s = KubernetesScaleActuator.from_policy(h.policy, kube.api_client())
    ticks = h.run(h.loop(UnreadableActuator(DeploymentController(kube, k8s, SimActuator(h.cluster)))), until_s=840)
    assert kube.replicas("deployments", NS, "dec") == ticks[-1].decision.targets()["decode"] > 1
    assert kube.replicas("deployments", NS, "pre") == ticks[-1].decision.targets()["prefill"]
    writes = kube.writes()
    changes, held = 0, {"prefill": 1, "decode": 1}
    for t in ticks:
        for pool, n in t.decision.targets().items():
            changes += n != held[pool]
            held[pool] = n
    assert len(writes) == changes > 0  # exactly one write per moved target, none while it holds


def test_forbidden_target_keeps_loop_alive(kube: FakeKube) -> None:
    kube.add_deployment(NS, "pre", 1)
    kube.add_deployment(NS, "dec", 1)
    kube.forbidden.add(("deployments/scale", "update"))
    h = SimHarness(step_trace(), policy())
    k8s = KubernetesScaleActuator.from_policy(h.policy, kube.api_client())
    ticks = h.run(h.loop(k8s), until_s=840)
    assert len(ticks) == 28
    failed = [t for t in ticks if t.error]
    assert failed and all("forbidden" in t.error and "deployments/scale" in t.error for t in failed)
    assert h.errors("actuate") == len(failed)


def test_any_tick_failure_is_counted_not_fatal() -> None:
    h = SimHarness(step_trace(), policy())

    class BrokenElector:
        def step(self, now_s: float) -> bool:
            raise KeyError("lease record")

    loop = h.loop(RecordingActuator(), elector=BrokenElector())
    ticks = h.run(loop, until_s=90)
    assert [t.error for t in ticks] == ["internal: 'lease record'"] * 3
    assert h.errors("internal") == 3
