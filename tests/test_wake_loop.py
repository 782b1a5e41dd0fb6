"""The controller's side of the router's wake signal: POST /v1/wake counts the held requests in the next read and
makes a policy at zero tick at once (service/wake.py), off its grid, which then goes on where it was. Fake clock
for the grid; the API over real HTTP."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from planner.controller import make_planner_controller
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.service.api import create_service_app
from planner.service.background import BackgroundServer
from planner.service.loop import ControlLoop, run_on_grid
from planner.service.wake import wait_or_wake
from planner.telemetry import PlannerMetrics
from planner.testing.actuator import RecordingActuator
from planner.testing.clock import FakeClock
from planner.types import NoData, NoDataReason, Observation, PoolObservation, Reason

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "h200" / "qwen3-8b.json"
TOKEN = "wake-token"


@pytest.mark.parametrize(("wakes_at", "ticks"), [
    ((), [0, 30, 60, 90]),
    ((40,), [0, 30, "40", 60, 90]),  # a wake ticks at once (quoted: the wake's tick); the grid goes on (60, not 70)
    ((40, 45), [0, 30, "40", "45", 60]),
    ((59.5,), [0, 30, "59.5", 60, 90]),
    ((59.97,), [0, 30, 59.97, 90, 120]),  # within GRID_SLACK_S of its grid point: the grid's tick, taken early
])
def test_a_wake_ticks_off_the_grid_and_keeps_the_grid(wakes_at: tuple[float, ...], ticks: list[float | str]
                                                      ) -> None:
    clock = FakeClock(0.0)
    at: list[float | str] = []
    pending = list(wakes_at)

    def wait(seconds: float) -> None:  # as wait_or_wake: the time passes, unless a wake comes first
        due = clock.now_s() + seconds
        if pending and pending[0] < due:
            clock.advance(pending.pop(0) - clock.now_s())
        else:
            clock.advance(seconds)

    run_on_grid(lambda: at.append(clock.now_s()), clock, 30.0, max_ticks=len(ticks), wait=wait,
                woken=lambda: at.append(f"{clock.now_s():g}"))
    assert at == ticks


def test_wait_or_wake_ends_at_the_wake_or_the_stop_or_the_time() -> None:
    stop, woken = threading.Event(), threading.Event()
    wait = wait_or_wake(stop, woken)
    started = time.monotonic()
    wait(0.3)
    assert 0.3 <= time.monotonic() - started < 2
    threading.Timer(0.2, woken.set).start()
    started = time.monotonic()
    wait(60)
    assert time.monotonic() - started < 5 and not woken.is_set()  # cleared: the next wait is a whole one
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    wait(60)
    assert time.monotonic() - started < 5


class Sleeping:
    """What Prometheus gives for a policy at zero: idle pools while replicas run, no series once none does."""

    def __init__(self) -> None:
        self.series = True

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        if not self.series:
            return NoData(NoDataReason.EMPTY, "no series", now_s)
        idle = PoolObservation(requests=0, rate_rps=0, ready_replicas=1)
        return Observation(now_s, window_s, {"prefill": idle, "decode": idle})


def _loop(clock: FakeClock, zero: bool) -> tuple[ControlLoop, Sleeping, RecordingActuator]:
    pools = {"min_replicas": 0} if zero else {}
    pol = parse_policy({"name": "sleepy", "profile": str(PROFILE), "interval_s": 30, "scale_to_zero_after_s": 60,
                        "pools": {"prefill": dict(pools), "decode": dict(pools)}, "actuator": {"kind": "dry-run"},
                        "forecast": {"model": "last-value"}})
    source, actuator = Sleeping(), RecordingActuator({"prefill": 1, "decode": 1})
    loop = ControlLoop(pol, make_planner_controller(pol, load_profile(PROFILE)), source, actuator, PlannerMetrics(),
                       clock)
    return loop, source, actuator


def test_the_router_wakes_a_policy_at_zero_over_the_api() -> None:
    clock = FakeClock(1_700_000_000.0)
    loop, source, actuator = _loop(clock, zero=True)
    for _ in range(5):  # idle past the 60 s window: to zero
        loop.tick()
        clock.advance(30)
    assert actuator.current == {"prefill": 0, "decode": 0}
    source.series = False  # no replica, no series
    loop.tick()
    assert actuator.current == {"prefill": 0, "decode": 0}  # nothing wakes it on its own
    with BackgroundServer(create_service_app([loop], TOKEN)) as server:
        assert httpx.post(server.url + "/v1/wake", json={"waiting": 2}, timeout=10).status_code == 401
        r = httpx.post(server.url + "/v1/wake", json={"policy": "other"}, timeout=10,
                       headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 404
        r = httpx.post(server.url + "/v1/wake", json={"waiting": 0}, timeout=10,
                       headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 422
        r = httpx.post(server.url + "/v1/wake", json={"policy": "sleepy", "waiting": 2}, timeout=10,
                       headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200 and r.json() == {"policy": "sleepy", "tick_now": True}
    assert loop.wake_signal.event.is_set()
    clock.advance(3)
    result = loop.tick()
    assert actuator.current == {"prefill": 1, "decode": 1}
    assert result.decision is not None and Reason.WAKE_TOGETHER in result.decision.reasons
    assert isinstance(result.observation, Observation) and result.observation.waiting == 2
    clock.advance(30)
    again = loop.tick()  # the signal was taken once: no series and nobody said more, so the decision holds
    assert isinstance(again.observation, NoData) and actuator.current == {"prefill": 1, "decode": 1}
    assert loop.wake(1) is False  # awake now: the requests count at the next tick, nothing ticks early


def test_a_policy_that_never_sleeps_is_not_woken_and_still_holds_on_no_data() -> None:
    clock = FakeClock(1_700_000_000.0)
    loop, source, actuator = _loop(clock, zero=False)
    loop.tick()
    before = dict(actuator.current)
    source.series = False
    assert loop.wake(5) is False
    clock.advance(30)
    result = loop.tick()
    assert result.decision is not None and Reason.NO_DATA_HOLD in result.decision.reasons
    assert isinstance(result.observation, NoData)
    assert actuator.current == before


class Counting(Sleeping):
    """Sleeping, counting its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        self.reads += 1
        return super().read(window_s, now_s)


def test_a_fleets_wake_tick_moves_only_the_policy_it_wakes(tmp_path: Path) -> None:
    """`planner run --fleet`: the router's wake ticks the sleeping policy off the grid; its neighbour is not read
    and keeps its grant (fitted around), and the next grid tick reads both."""
    from planner.fleet_file import load_fleet
    from planner.service.fleet_loop import FleetLoop
    from tests.support.fleet_support import member, write_fleet

    zero = {"pools": {"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 0}}, "scale_to_zero_after_s": 60,
            "forecast": {"model": "last-value"}, "actuator": {"kind": "dry-run"}}
    fleet = load_fleet(write_fleet(tmp_path, [member("sleepy", 0, **zero),
                                              member("busy", 10, forecast={"model": "last-value"},
                                                     actuator={"kind": "dry-run"})], max_gpus=64))
    clock = FakeClock(1_700_000_000.0)
    sources = {"sleepy": Counting(), "busy": Counting()}
    actuators = {n: RecordingActuator({"prefill": 1, "decode": 1}) for n in sources}
    metrics = PlannerMetrics()
    loops = [ControlLoop(m.policy, make_planner_controller(m.policy, m.profile), sources[m.name], actuators[m.name],
                         metrics, clock) for m in fleet.members]
    fleet_loop = FleetLoop(fleet, loops)
    for _ in range(5):  # idle past sleepy's 60 s window: to zero; busy keeps its floors
        fleet_loop.tick()
        clock.advance(30)
    assert actuators["sleepy"].current == {"prefill": 0, "decode": 0}
    sources["sleepy"].series = False
    busy_before = (sources["busy"].reads, dict(actuators["busy"].current), len(actuators["busy"].calls))
    sleepy_reads = sources["sleepy"].reads
    assert fleet_loop.wake_tick() == []  # nobody is held at the router: nothing ticks
    assert fleet_loop.loops["busy"].wake(4) is False and fleet_loop.wake_tick() == []  # awake: counted at the grid
    assert fleet_loop.loops["sleepy"].wake(2) is True
    clock.advance(7)
    results = fleet_loop.wake_tick()
    assert [r.decision is not None and Reason.WAKE_TOGETHER in r.decision.reasons for r in results] == [True]
    assert actuators["sleepy"].current == {"prefill": 1, "decode": 1} and sources["sleepy"].reads == sleepy_reads + 1
    assert (sources["busy"].reads, dict(actuators["busy"].current), len(actuators["busy"].calls)) == busy_before
    assert set(fleet_loop.last.fit.order) == {"sleepy", "busy"} and fleet_loop.last.held == frozenset({"busy"})
    clock.advance(23)
    assert len(fleet_loop.tick()) == 2 and sources["busy"].reads == busy_before[0] + 1  # the grid: both


class Loaded:
    """A policy under steady load: every read shows ``rate`` req/s on the replicas it was last given."""

    def __init__(self, rate: float, actuator: RecordingActuator) -> None:
        self.rate, self.actuator = rate, actuator

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        from tests.support.decide_support import observation

        return observation(now_s, self.rate, ready=dict(self.actuator.current))


class Draining(RecordingActuator):
    """A process actuator's view: replicas out of the router's rotation, still finishing (and holding GPUs)."""

    def __init__(self, initial: dict[str, int], draining: dict[str, int]) -> None:
        super().__init__(initial)
        self.draining = draining

    def draining_replicas(self) -> dict[str, int]:
        return dict(self.draining)


def test_a_fleet_does_not_grant_the_gpus_of_replicas_still_draining(tmp_path: Path) -> None:
    """`planner run --fleet`: GPUs still held by draining replicas are not granted again until they are free
    (as in the simulator's fleet replay); the granted GPUs plus the draining ones stay within the budget."""
    from planner.fleet_file import load_fleet
    from planner.service.fleet_loop import FleetLoop
    from tests.support.fleet_support import member, write_fleet

    granted: dict[int, int] = {}
    for drained in (0, 1):
        over = {"forecast": {"model": "last-value"}, "actuator": {"kind": "dry-run"}}
        fleet = load_fleet(write_fleet(tmp_path / str(drained), [member("hi", 10, **over), member("lo", 0, **over)],
                                       max_gpus=24))
        clock = FakeClock(1_700_000_000.0)
        actuators = {"hi": Draining({"prefill": 2, "decode": 1}, {"prefill": 0, "decode": 0}),
                     "lo": Draining({"prefill": 2, "decode": 1}, {"prefill": 0, "decode": drained})}
        loops = [ControlLoop(m.policy, make_planner_controller(m.policy, m.profile), Loaded(60.0, actuators[m.name]),
                             actuators[m.name], PlannerMetrics(), clock) for m in fleet.members]
        fleet_loop = FleetLoop(fleet, loops)
        for _ in range(3):
            fleet_loop.tick()
            clock.advance(30)
        tick = fleet_loop.last
        assert tick is not None and tick.fit.binds
        per_decode = tick.granted["lo"].pools["decode"].gpus_per_replica
        assert fleet_loop.draining_gpus() == drained * per_decode
        granted[drained] = tick.fit.used_gpus
        assert granted[drained] + fleet_loop.draining_gpus() <= 24
    assert granted[1] < granted[0]


class LoadedOrAsleep(Loaded):
    """Loaded while its actuator runs replicas; no series at all once it is at zero (as Prometheus, live)."""

    def read(self, window_s: float, now_s: float) -> Observation | NoData:
        if not any(self.actuator.current.values()):
            return NoData(NoDataReason.EMPTY, "no series", now_s)
        return super().read(window_s, now_s)


@pytest.mark.parametrize(("wake_first", "after_s"), [(True, 0.0), (False, 0.0), (True, 60.0)])
def test_a_fleet_wakes_a_sleeping_policy_ahead_of_a_higher_priority_that_wants_the_budget(
        tmp_path: Path, wake_first: bool, after_s: float) -> None:
    """`planner run --fleet`: a priority-0 policy at zero with requests held at the router gets its smallest size
    (one replica per pool) although the priority-10 policy asks for the whole budget (24 GPUs); the latter carries
    fleet_wake for the GPUs it lost (before, the sleeping policy stayed at zero and its held requests timed out).
    With fleet.yaml's ``budget.wake_first: false`` strict priority keeps it asleep; with ``wake_after_s: 60`` it
    waits for its priority for 60 s (two ticks, the router repeating its signal), then wakes first."""
    from planner.fleet_file import load_fleet
    from planner.service.fleet_loop import FleetLoop
    from tests.support.fleet_support import member, write_fleet

    zero = {"pools": {"prefill": {"min_replicas": 0}, "decode": {"min_replicas": 0}}, "scale_to_zero_after_s": 60,
            "forecast": {"model": "last-value"}, "actuator": {"kind": "dry-run"}}
    fleet = load_fleet(write_fleet(tmp_path, [member("sleepy", 0, **zero),
                                              member("busy", 10, forecast={"model": "last-value"},
                                                     actuator={"kind": "dry-run"})], max_gpus=24))
    fleet = replace(fleet, budget=fleet.budget.model_copy(update={"wake_first": wake_first, "wake_after_s": after_s}))
    clock = FakeClock(1_700_000_000.0)
    actuators = {"sleepy": RecordingActuator({"prefill": 0, "decode": 0}),
                 "busy": RecordingActuator({"prefill": 4, "decode": 2})}
    sources = {"sleepy": LoadedOrAsleep(2.0, actuators["sleepy"]), "busy": Loaded(120.0, actuators["busy"])}
    loops = [ControlLoop(m.policy, make_planner_controller(m.policy, m.profile), sources[m.name], actuators[m.name],
                         PlannerMetrics(), clock) for m in fleet.members]
    fleet_loop = FleetLoop(fleet, loops)
    for _ in range(3):  # busy asks for the whole budget and gets it; sleepy sleeps, unasked
        fleet_loop.tick()
        clock.advance(30)
    tick = fleet_loop.last
    assert tick is not None and tick.fit.granted_gpus == {"busy": 24, "sleepy": 0}
    assert actuators["sleepy"].current == {"prefill": 0, "decode": 0}
    before = tick.fit.granted_gpus["busy"]
    assert fleet_loop.loops["sleepy"].wake(3) is True  # the router holds 3 requests for it
    fleet_loop.tick()
    tick = fleet_loop.last
    if after_s > 0:
        for waited in range(int(after_s // 30)):  # waiting for its priority, the router repeating its signal
            assert tick is not None and actuators["sleepy"].current == {"prefill": 0, "decode": 0}
            assert tick.wake_since == {"sleepy": tick.at_s - waited * 30.0} and tick.fit.reason("busy") is None
            clock.advance(30)
            assert fleet_loop.loops["sleepy"].wake(3) is True
            fleet_loop.tick()
            tick = fleet_loop.last
    assert tick.fit.used_gpus <= 24
    if not wake_first:
        assert actuators["sleepy"].current == {"prefill": 0, "decode": 0} and tick.fit.reason("busy") is None
        assert tick.fit.reason("sleepy") is Reason.FLEET_PRIORITY
        return
    assert actuators["sleepy"].current == {"prefill": 1, "decode": 1}
    assert tick.fit.reason("busy") is Reason.FLEET_WAKE and tick.fit.granted_gpus["busy"] < before
