"""Faults, one test per row of docs/faults.md: what each fault does and what the controller did.

Every row runs the real control loop with the real Kubernetes actuator (official client) against
tests/support/fake_kube.py, and asserts that no pool ever leaves [floor, ceiling] = [2, 8]. Prometheus faults use a
real Prometheus where one can run (tests/support/prom_fixtures.py) and a fake HTTP server for garbage and delays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from planner.actuators.kubernetes import KubernetesScaleActuator
from planner.controller import make_planner_controller
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.leader import LeaseElector
from planner.service.loop import ControlLoop, TickResult
from planner.sources.prometheus import PrometheusSource
from planner.telemetry import PlannerMetrics
from planner.testing.actuator import RecordingActuator, UnreadableActuator
from planner.testing.clock import FakeClock
from planner.testing.ports import free_port
from planner.types import Observation, PoolObservation, Reason
from tests.support.fake_kube import FakeKube
from tests.support.prom_fixtures import FakeHTTP, PromEnv, fake_http, prom_env, vllm_exposition  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"
NS = "llm"
FLOOR, CEILING, START = 2, 8, 4
T0 = 1_700_000_000.0


def policy(url: str = "http://127.0.0.1:9", timeout_s: float = 0.5):  # noqa: ANN201
    return parse_policy({
        "name": "faults", "profile": str(PROFILE), "interval_s": 30, "startup_s": 60,
        "pools": {p: {"target": {"name": p[:3], "namespace": NS}, "min_replicas": FLOOR, "max_replicas": CEILING}
                  for p in ("prefill", "decode")},
        "forecast": {"model": "last-value"},
        "metrics": {"url": url, "timeout_s": timeout_s, "selectors": {"prefill": '{pool="prefill"}',
                                                                      "decode": '{pool="decode"}'}},
        "behavior": {"scale_down": {"stabilization_window_s": 60,
                                    "policies": [{"type": "percent", "value": 100, "period_s": 30}]}}})


class Load:
    """A steady load: ``surge`` asks for more than the ceiling, ``idle`` (a trickle) for less than the floor."""

    def __init__(self, kind: str) -> None:
        self.rate_rps = {"surge": 400.0, "idle": 0.05}[kind]

    def read(self, window_s: float, now_s: float) -> Observation:
        pool = PoolObservation(requests=self.rate_rps * window_s, rate_rps=self.rate_rps, isl_mean=2000,
                               osl_mean=300, ttft_ms_p95=100, itl_ms_p95=10, ready_replicas=START)
        return Observation(now_s, window_s, {"prefill": pool, "decode": pool})


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube().start()
    k.add_deployment(NS, "pre", START)
    k.add_deployment(NS, "dec", START)
    yield k
    k.stop()


def make_loop(kube: FakeKube, source, clock: FakeClock, pol=None, elector=None,  # noqa: ANN001
              request_timeout_s: float = 10.0) -> ControlLoop:
    pol = pol or policy()
    metrics = PlannerMetrics()
    act = KubernetesScaleActuator.from_policy(
        pol, kube.api_client(retries=0), request_timeout_s=request_timeout_s,
        may_write=elector.may_write if elector else None,
        on_conflict=lambda p: metrics.actuation_conflicts.labels(policy=pol.name, pool=p).inc())
    return ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), source,
                       RecordingActuator(inner=act), metrics, clock, elector=elector)


def replicas(kube: FakeKube) -> tuple[int, int]:
    return kube.replicas("deployments", NS, "pre"), kube.replicas("deployments", NS, "dec")


def run(loop: ControlLoop, kube: FakeKube, ticks: int) -> list[TickResult]:
    out = []
    for _ in range(ticks):
        out.append(loop.tick())
        assert all(FLOOR <= n <= CEILING for n in replicas(kube)), replicas(kube)  # every row, every tick
        loop.clock.advance(loop.interval_s)  # type: ignore[attr-defined]
    return out


def errors(loop: ControlLoop, kind: str) -> float:
    return loop.metrics.registry.get_sample_value("planner_errors_total", {"policy": "faults", "kind": kind}) or 0


# ------------------------------------------------------------------------------------------ Prometheus
def assert_held(loop: ControlLoop, kube: FakeKube, results: list[TickResult], reason: str,
                caplog: pytest.LogCaptureFixture) -> None:
    assert replicas(kube) == (START, START) and kube.scale_writes() == []
    assert all(r.decision is not None and Reason.NO_DATA_HOLD in r.decision.reasons for r in results)
    assert errors(loop, f"no_data_{reason}") == len(results)
    outage = [r for r in caplog.records if r.levelno >= logging.WARNING and "holding" in r.getMessage()]
    assert len(outage) == 1 and reason in outage[0].getMessage()  # one line per outage


def test_prometheus_down(kube: FakeKube, caplog: pytest.LogCaptureFixture) -> None:
    pol = policy(f"http://127.0.0.1:{free_port()}")
    loop = make_loop(kube, PrometheusSource.from_policy(pol, pol.metrics), FakeClock(T0), pol)
    assert_held(loop, kube, run(loop, kube, 5), "unreachable", caplog)
    assert not loop.monitor.ready


def test_prometheus_slower_than_the_timeout(kube: FakeKube, fake_http: Callable[..., FakeHTTP],  # noqa: F811
                                            caplog: pytest.LogCaptureFixture) -> None:
    server = fake_http()
    server.delay_s = 1.5
    pol = policy(server.url, timeout_s=0.3)
    loop = make_loop(kube, PrometheusSource.from_policy(pol, pol.metrics), FakeClock(T0), pol)
    assert_held(loop, kube, run(loop, kube, 3), "timeout", caplog)


@pytest.mark.parametrize("status,body", [(200, "<html>proxy error</html>"),
                                         (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
                                         (200, {"status": "success", "data": {"resultType": "vector",
                                                                              "result": [{"metric": {}}]}})],
                         ids=["html", "wrong-result-type", "malformed-sample"])
def test_prometheus_garbage(kube: FakeKube, fake_http: Callable[..., FakeHTTP], status: int,  # noqa: F811
                            body: object, caplog: pytest.LogCaptureFixture) -> None:
    server = fake_http()
    server.status, server.body = status, body  # type: ignore[assignment]
    pol = policy(server.url)
    loop = make_loop(kube, PrometheusSource.from_policy(pol, pol.metrics), FakeClock(T0), pol)
    assert_held(loop, kube, run(loop, kube, 3), "bad_response", caplog)


@pytest.mark.prometheus
def test_prometheus_partial_series(kube: FakeKube, prom_env: PromEnv, fake_http: Callable[..., FakeHTTP],  # noqa: F811
                                   caplog: pytest.LogCaptureFixture) -> None:
    """A real Prometheus that has the prefill engines' series but none of the decode pool's."""
    pre, dec = prom_env.take(2)
    fake_http(pre.port, vllm_exposition(success=30, running=2))
    prom_env.wait_for(f"vllm:num_requests_running{pre.selector}", bool)
    pol = policy(prom_env.url, timeout_s=2)
    source = PrometheusSource(prom_env.url, "vllm", {"prefill": pre.selector, "decode": dec.selector})
    loop = make_loop(kube, source, FakeClock(time.time()), pol)
    results = []
    for _ in range(3):
        results += run(loop, kube, 1)
        loop.clock = FakeClock(time.time())  # real time: Prometheus answers for now, not for a fake future
    assert_held(loop, kube, results, "missing_pool", caplog)


# ------------------------------------------------------------------------------------------ API server
def _forbid(kube: FakeKube) -> None:
    kube.forbidden.add(("deployments/scale", "update"))


API_FAULTS = {  # fault -> (inject it, clear it)
    "409": (lambda k: setattr(k, "conflicts_to_inject", 3), lambda k: None),
    "403": (_forbid, lambda k: k.forbidden.clear()),
    "404": (lambda k: k.inject("GET", "/dec/scale$", status=404), lambda k: k.faults.clear()),
    "500": (lambda k: k.inject("PUT", "/scale$", status=500), lambda k: k.faults.clear()),
    "503": (lambda k: k.inject(None, "/scale$", status=503), lambda k: k.faults.clear()),
    "timeout": (lambda k: k.inject(None, "/scale$", delay_s=3.0), lambda k: k.faults.clear()),
}


@pytest.mark.parametrize("load", ["surge", "idle"])
@pytest.mark.parametrize("fault", list(API_FAULTS))
def test_api_server_faults(kube: FakeKube, fault: str, load: str) -> None:
    """4 ticks under the fault (idle: the first two sit in the seeded scale-down window), then 6 without."""
    inject, clear = API_FAULTS[fault]
    loop = make_loop(kube, Load(load), FakeClock(T0), request_timeout_s=1.0)
    inject(kube)
    during = run(loop, kube, 4)
    held = replicas(kube)
    counted = errors(loop, "actuate") + errors(loop, "seed")
    clear(kube)
    run(loop, kube, 6)
    want = CEILING if load == "surge" else FLOOR
    assert replicas(kube) == (want, want)  # once the fault clears, the decision is applied, clamped
    failed = [r.error for r in during if r.error]
    if fault == "409":  # re-read and written again within the tick: no error, each conflict counted
        assert failed == [] and counted == 0
        conflicts = loop.metrics.registry.get_sample_value("planner_actuation_conflicts_total",
                                                           {"policy": "faults", "pool": "prefill"})
        assert conflicts == 3
        return
    # A fault on reads meets the first tick's seeding read (kind seed: nothing written until it can read).
    assert failed and all(e.startswith(("actuate:", "seed:")) for e in failed)
    assert counted == len(failed)
    if fault in ("500", "503", "timeout"):
        assert held == (START, START)  # nothing was written while the API server failed
    expected = {"403": ("forbidden", "deployments/scale", "rbac.yaml"), "404": ("Deployment llm/dec", "not found"),
                "500": ("API error 500",), "503": ("API error 503",),
                "timeout": ("cannot reach the Kubernetes API",)}[fault]
    assert all(word in failed[0] for word in expected), failed[0]


# ------------------------------------------------------------------------------------------ restart
class Killed(BaseException):
    """The process dies (SIGKILL, OOM): nothing catches it, nothing after it runs."""


def test_killed_between_decide_and_apply(kube: FakeKube) -> None:
    clock = FakeClock(T0)
    first = make_loop(kube, Load("idle"), clock)

    def die(targets):  # noqa: ANN001, ANN202 - decided, then killed before the write
        raise Killed()

    first.actuator.apply = die  # type: ignore[method-assign]
    with pytest.raises(Killed):
        first.tick()
    assert first.controller.last_forecast is not None or first.last is None  # it decided
    second = make_loop(kube, Load("idle"), clock)  # the restarted process
    results = run(second, kube, 1)
    assert replicas(kube) == (START, START) and kube.scale_writes() == []  # reseeded: no scale-down
    assert Reason.SCALE_DOWN_STABILIZED in results[0].decision.reasons  # type: ignore[union-attr]
    run(second, kube, 4)
    assert replicas(kube) == (FLOOR, FLOOR)  # after the window, down to the floor and not below


# ------------------------------------------------------------------------------------------ leader election
def test_two_replicas_exactly_one_acts_and_the_other_takes_over(kube: FakeKube) -> None:
    clock = FakeClock(T0)
    lease_s = 45.0
    loops = {who: make_loop(kube, Load("surge"), clock, elector=LeaseElector(
        kube.api_client(retries=0), "planner", NS, who, lease_s, clock=clock.now_s)) for who in ("a", "b")}
    for _ in range(6):
        results = {who: loop.tick() for who, loop in loops.items()}
        assert sorted(r.leader for r in results.values()) == [False, True]  # exactly one leads
        clock.advance(30)
    assert loops["a"].actuator.calls and not loops["b"].actuator.calls  # only the leader applies
    last_renewal = loops["a"].elector._renewed_s  # type: ignore[union-attr] - a dies right after it renewed
    killed_at = clock.now_s()  # its next tick never comes; b keeps ticking
    taken_over = None
    for _ in range(5):
        if loops["b"].tick().leader:
            taken_over = clock.now_s()
            break
        clock.advance(30)
    assert taken_over is not None
    takeover_s = taken_over - last_renewal  # type: ignore[operator]
    # The standby checks once a tick: it takes over at its first tick after the lease expired.
    assert lease_s <= takeover_s <= lease_s + loops["b"].interval_s
    assert all(FLOOR <= n <= CEILING for n in replicas(kube))
    before = len(loops["a"].actuator.calls)
    run(loops["b"], kube, 2)
    assert len(loops["a"].actuator.calls) == before and replicas(kube) == (CEILING, CEILING)  # b acts, clamped
    print(f"figure: takeover {takeover_s:.0f} s after the dead leader's last renewal, {taken_over - killed_at:.0f} s "
          f"after its first missed tick (lease {lease_s:.0f} s, interval 30 s)")


# ------------------------------------------------------------------------------------------ 24 hours
@pytest.mark.slow
def test_a_day_on_the_simulator_flat_memory_no_missed_tick() -> None:
    """24 simulated hours (2,880 ticks) of a diurnal load through the simulated cluster, on a FakeClock.

    Memory is what the controller's own code holds (held_bytes: every object reachable from the loop and from
    the planner's module globals, caches included, not counting the simulator, whose request log grows with the
    trace by design), compared between hour 4 (history, decision log and telemetry full) and hour 24. (It was
    tracemalloc over the whole day, which made the test 8x slower, 240 s of CI's 2 cores.)"""
    from planner.service.decisions import DecisionLog
    from planner.sim.cluster.metrics import SimActuator
    from planner.sim.traces.synthetic import sinusoid
    from tests.test_service_loop import SimHarness
    from tests.test_service_loop import policy as sim_policy

    day_s, interval_s = 86_400.0, 30.0
    pol = sim_policy(forecast={"model": "last-value", "history_s": 3600})
    h = SimHarness(sinusoid(0.2, 0.16, day_s / 2, day_s, isl=1000, osl=200, seed=5), pol)
    loop = h.loop(UnreadableActuator(SimActuator(h.cluster)), decisions=DecisionLog(keep=240))
    starts: list[float] = []
    sizes: dict[int, int] = {}

    def wait(seconds: float) -> None:
        starts.append(loop.last.at_s)  # type: ignore[union-attr]
        assert all(1 <= n <= 16 for n in loop.last.decision.targets().values())  # type: ignore[union-attr]
        hour = int((h.clock.now_s() + seconds) // 3600)
        if hour in (4, 24) and hour not in sizes:
            sizes[hour] = held_bytes(loop)
        h.wait(seconds)

    h.wait(interval_s)
    loop.run(max_ticks=int(day_s // interval_s), wait=wait)
    expected = [interval_s + k * interval_s for k in range(len(starts))]
    missed = int(day_s // interval_s) - len(starts) - 1
    assert starts == expected and missed == 0  # every grid point ticked, none skipped
    growth = sizes[24] - sizes[4]
    assert growth < 256 * 1024, f"controller memory grew {growth} B from hour 4 to hour 24"
    print(f"figure: {len(starts) + 1} ticks, {missed} missed; controller memory {sizes[4] / 1024:.0f} KiB at hour 4, "
          f"{sizes[24] / 1024:.0f} KiB at hour 24 (growth {growth / 1024:+.1f} KiB)")


def held_bytes(loop: object) -> int:
    """Bytes of every object reachable from ``loop`` and from the planner's module globals (lru caches, module
    registries), each counted once (sys.getsizeof), the simulator's objects and code (modules, classes,
    functions) not entered: what the controller's own code keeps alive."""
    import gc
    import sys
    import types

    code = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, types.MethodDescriptorType,
            types.WrapperDescriptorType, types.GetSetDescriptorType)
    modules = [m for n, m in sys.modules.items() if n.startswith("planner.") and not n.startswith("planner.sim")]
    stack: list[object] = [loop, *(vars(m) for m in modules)]
    seen: set[int] = set()
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        owner = type(obj).__module__ or ""
        if isinstance(obj, code) or owner.startswith(("planner.sim", "tests.")):
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, types.FunctionType):  # what a closure or default holds, not its module's globals
            stack.extend([*(obj.__closure__ or ()), *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()])
        else:
            stack.extend(gc.get_referents(obj))
    return total
