"""The process actuator on real local processes (`planner emulate` engines): scale up and down idempotently,
targets.json lists exactly the ready replicas, drain waits for in-flight requests after the router dropped
the replica, and each fault - port taken, never ready, exits at start, crash while serving - is counted,
said in one log line and held or repaired."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.actuators.process import ProcessActuator
from planner.actuators.replica import group_alive, substitute
from planner.policy_file import parse_policy
from planner.router.app import create_router_app
from planner.service.background import BackgroundServer
from planner.types import Mode
from tests.support.process_fixtures import (
    alive,
    descendants,
    emulator_command,
    port_range,
    registry_value,
    stream,
    targets,
    wait_until,
)

REPO = Path(__file__).resolve().parent.parent
LOGGER = "planner.actuators.process"


def policy(tmp_path: Path, mode: str = "aggregated", **actuator: object):  # noqa: ANN201 - Policy
    pools = {"aggregated": {"min_replicas": 1, "max_replicas": 4}} if mode == "aggregated" else {
        "prefill": {"min_replicas": 1}, "decode": {"min_replicas": 1}}
    act = {"kind": "process", "command": emulator_command(), "port_range": list(port_range()),
           "state_dir": str(tmp_path / "state"), "drain_s": 10, "stop_grace_s": 5, **actuator}
    return parse_policy({"name": "proc", "mode": mode, "profile": str(REPO / "profiles/h200/qwen3-0.6b.json"),
                         "pools": pools, "actuator": act}, "test-policy")


@pytest.fixture
def actuators() -> Iterator[list[ProcessActuator]]:
    made: list[ProcessActuator] = []
    yield made
    for a in made:
        a.close(timeout_s=30)


GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def make(made: list[ProcessActuator], tmp_path: Path, gauges: tuple[str, ...] = GAUGES,
         **actuator: object) -> ProcessActuator:
    pol = policy(tmp_path, **actuator)
    a = ProcessActuator.from_policy(pol, pol.actuator, gauges)
    made.append(a)
    return a


def ready(a: ProcessActuator, pool: str = "aggregated") -> list[int]:
    return a.snapshot()[pool]["ready"]


def events(a: ProcessActuator, event: str, pool: str = "aggregated") -> float:
    return registry_value(a.metrics.registry, "planner_engine_events_total", policy="proc", pool=pool, event=event)


def test_placeholders_are_replaced_literally_and_json_braces_survive() -> None:
    kv = '{"kv_connector":"ExampleConnector","kv_role":"kv_producer"}'
    assert substitute(["serve", "--port", "{port}", "--name", "x-{pool}-{port}", "--kv", kv], 8101, "prefill") == [
        "serve", "--port", "8101", "--name", "x-prefill-8101", "--kv", kv]


def test_scales_up_and_down_idempotently_and_lists_exactly_the_ready_replicas(actuators, tmp_path) -> None:
    a = make(actuators, tmp_path)
    assert a.read_replicas() == {"aggregated": 0}  # what it holds: nothing before the first apply
    first = a.apply({})  # a controller's first tick decides nothing: the pool starts at its floor
    assert (first.changed, dict(first.before), dict(first.after)) == (True, {"aggregated": 0}, {"aggregated": 1})
    assert a.snapshot()["aggregated"]["starting"] and targets(a.targets_file) == {}  # not listed until ready
    wait_until(lambda: len(ready(a)) == 1, 60, "the floor replica to be ready")
    (p1,) = ready(a)
    assert targets(a.targets_file) == {"aggregated": [p1]}
    again = a.apply({"aggregated": 1})
    assert (again.changed, dict(again.before), dict(again.after)) == (False, {"aggregated": 1}, {"aggregated": 1})

    up = a.apply({"aggregated": 2})
    assert (up.changed, dict(up.before), dict(up.after)) == (True, {"aggregated": 1}, {"aggregated": 2})
    assert a.apply({"aggregated": 2}).changed is False  # the second one is starting: nothing more to do
    assert a.read_replicas() == {"aggregated": 2}  # the desired size, starting replica included
    wait_until(lambda: len(ready(a)) == 2, 60, "two ready replicas")
    assert targets(a.targets_file) == {"aggregated": sorted(ready(a))}
    assert registry_value(a.metrics.registry, "planner_engine_replicas", policy="proc", pool="aggregated",
                          state="ready") == 2
    newest = max(a.replicas, key=lambda r: r.launched_s)
    group = newest.pgid

    down = a.apply({"aggregated": 1})
    assert (down.changed, dict(down.before), dict(down.after)) == (True, {"aggregated": 2}, {"aggregated": 1})
    assert newest.port not in targets(a.targets_file).get("aggregated", [])  # out of the file at once
    wait_until(lambda: not group_alive(group), 30, "the retired replica's process group to end")
    assert targets(a.targets_file) == {"aggregated": [p1]} and ready(a) == [p1]  # the newest went
    assert (events(a, "launched"), events(a, "ready"), events(a, "drained")) == (2, 2, 1)

    groups = [r.pgid for r in a.replicas]
    a.close()
    assert targets(a.targets_file) == {} and not any(group_alive(g) for g in groups)


def test_drain_waits_for_in_flight_requests_after_the_router_dropped_the_replica(actuators, tmp_path) -> None:
    state = tmp_path / "state"
    app = create_router_app(state / "targets.json", Mode.AGGREGATED)
    backends = app.state.backends
    router = BackgroundServer(app, port=0).start()
    results: list = []
    try:
        a = make(actuators, tmp_path, router_url=router.url, drain_s=30)
        a.apply({"aggregated": 2})
        wait_until(lambda: len(ready(a)) == 2 and len(backends.by_address) == 2, 60, "two replicas in rotation")
        # Two long streams (~300 tokens at ~26 ms each): least-outstanding puts one on each replica.
        clients = [threading.Thread(target=lambda: results.append(stream(router.url, "a b c " * 50, 300)))
                   for _ in range(2)]
        for c in clients:
            c.start()
        wait_until(lambda: all(b.outstanding == 1 for b in backends.by_address.values()), 30, "one stream on each")
        retired = max(a.replicas, key=lambda r: r.launched_s)  # scale-down retires the newest
        kept = next(r for r in a.replicas if r is not retired)
        a.apply({"aggregated": 1})
        gone = backends.by_address[retired.address]
        wait_until(lambda: not gone.in_rotation, 5, "the router to drop the replica")
        assert retired.exit_code() is None and gone.outstanding == 1  # dropped, not stopped: still streaming
        assert a.draining_replicas() == {"aggregated": 1}  # its GPUs still held: a fleet does not grant them
        sent_before = backends.by_address[kept.address].sent
        quick = stream(router.url, "x y", 3)  # new requests go to the other replica meanwhile
        assert quick.done and backends.by_address[kept.address].sent == sent_before + 1
        assert retired.exit_code() is None
        for c in clients:
            c.join(60)
        wait_until(lambda: retired.exit_code() is not None, 30, "the drained replica to stop")
        wait_until(lambda: a.draining_replicas() == {"aggregated": 0}, 10, "the drained replica to be forgotten")
    finally:
        router.stop()
    assert len(results) == 2
    for s in results:  # nothing lost: both streams complete, the drained replica's included
        assert s.status == 200 and s.done and s.error is None and s.completion_tokens == 300
    assert events(a, "drained") == 1 and events(a, "drain_timeout") == 0


def test_scale_down_retires_the_replica_the_router_counts_least_in_flight_not_the_newest(actuators, tmp_path,
                                                                                       caplog) -> None:
    """The router's count alone decides (the engines' gauges are named wrongly, so unknown): the newest replica
    carries a stream and stays; the older, idle one is drained and stopped; the stream completes."""
    caplog.set_level(logging.INFO, LOGGER)
    state = tmp_path / "state"
    app = create_router_app(state / "targets.json", Mode.AGGREGATED)
    backends = app.state.backends
    router = BackgroundServer(app, port=0).start()
    results: list = []
    try:
        a = make(actuators, tmp_path, gauges=("no_such_gauge",), router_url=router.url, drain_s=30)
        a.apply({"aggregated": 2})
        wait_until(lambda: len(ready(a)) == 2 and len(backends.by_address) == 2, 60, "two replicas in rotation")
        oldest, newest = sorted(a.replicas, key=lambda r: r.launched_s)
        # A long stream on each replica, then the one on the oldest ends early: only the newest is busy.
        short = threading.Thread(target=lambda: results.append(stream(router.url, "a b", 5)))
        long = threading.Thread(target=lambda: results.append(stream(router.url, "a b c " * 20, 250)))
        short.start()
        wait_until(lambda: sum(b.sent for b in backends.by_address.values()) == 1, 10, "the short stream sent")
        long.start()
        wait_until(lambda: all(b.sent == 1 for b in backends.by_address.values()), 10, "one stream on each")
        short.join(30)
        busy = backends.by_address[newest.address]
        if busy.outstanding != 1:  # the router put the long stream on the oldest: swap roles, still a test
            oldest, newest = newest, oldest
            busy = backends.by_address[newest.address]
        assert busy.outstanding == 1 and backends.by_address[oldest.address].outstanding == 0
        a.apply({"aggregated": 1})
        wait_until(lambda: oldest.exit_code() is not None, 30, "the idle replica to be drained and stopped")
        assert newest.exit_code() is None and ready(a) == [newest.port]
        assert targets(a.targets_file) == {"aggregated": [newest.port]}
        long.join(60)
    finally:
        router.stop()
    assert sorted(s.completion_tokens for s in results) == [5, 250]
    assert all(s.status == 200 and s.done and s.error is None for s in results)
    assert events(a, "drained") == 1 and events(a, "drain_timeout") == 0
    assert f"in flight per port: {oldest.port}: 0, {newest.port}: 1" in caplog.text or \
        f"in flight per port: {newest.port}: 1, {oldest.port}: 0" in caplog.text


def test_scale_down_without_a_router_retires_the_replica_whose_engine_holds_least(actuators, tmp_path) -> None:
    """No router: the engines' own in-system gauges decide. A client talks to the newest replica directly;
    the scale-down takes the older, idle one, and the direct stream completes."""
    a = make(actuators, tmp_path)
    a.apply({"aggregated": 2})
    wait_until(lambda: len(ready(a)) == 2, 60, "two ready replicas")
    oldest, newest = sorted(a.replicas, key=lambda r: r.launched_s)
    results: list = []
    client = threading.Thread(target=lambda: results.append(stream(newest.url, "a b c " * 20, 250)))
    client.start()
    wait_until(lambda: (newest.in_flight(GAUGES) or 0) >= 1, 10, "the stream to reach the newest engine")
    a.apply({"aggregated": 1})
    wait_until(lambda: oldest.exit_code() is not None, 30, "the idle replica to be drained and stopped")
    assert newest.exit_code() is None and ready(a) == [newest.port]
    client.join(60)
    assert len(results) == 1 and results[0].status == 200 and results[0].done
    assert results[0].completion_tokens == 250
    assert events(a, "drained") == 1


def test_a_taken_port_is_skipped_and_said_once(actuators, tmp_path, caplog) -> None:
    first, last = port_range()
    blocker = __import__("socket").socket()
    blocker.bind(("127.0.0.1", first))
    blocker.listen()
    try:
        a = make(actuators, tmp_path, port_range=[first, last])
        with caplog.at_level(logging.INFO, logger=LOGGER):
            a.apply({"aggregated": 2})
            wait_until(lambda: len(ready(a)) == 2, 60, "two ready replicas")
        assert sorted(ready(a)) == [first + 1, first + 2]
        said = [r for r in caplog.records if "is taken by another process" in r.getMessage()]
        assert len(said) == 1 and str(first) in said[0].getMessage()  # one line, though two replicas passed it
        assert events(a, "port_taken") == 1
    finally:
        blocker.close()


def test_a_replica_that_never_becomes_ready_times_out_is_counted_and_the_pool_holds(actuators, tmp_path,
                                                                                   caplog) -> None:
    never = [sys.executable, "-c", "import sys, time; time.sleep(120)", "{port}"]
    a = make(actuators, tmp_path, command=never, ready_timeout_s=1.5, stop_grace_s=2)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        a.apply({"aggregated": 1})
        (replica,) = a.replicas
        wait_until(lambda: events(a, "start_timeout") == 1, 20, "the start to time out")
        wait_until(lambda: not group_alive(replica.pgid), 20, "the stuck replica to be stopped")
        held = a.apply({"aggregated": 1})  # the controller asks again during the back-off: nothing happens
    assert held.changed is False and a.snapshot()["aggregated"] == {"starting": [], "ready": [], "draining": []}
    lines = [r for r in caplog.records if "not ready within ready_timeout_s" in r.getMessage()]
    assert len(lines) == 1 and "next try in 5 s" in lines[0].getMessage()
    assert events(a, "launched") == 1 and targets(a.targets_file) == {}


def test_a_replica_that_exits_before_it_is_ready_is_counted_with_its_last_log_line(actuators, tmp_path,
                                                                                  caplog) -> None:
    crash = [sys.executable, "-c", "import sys; print('bad flag --port', sys.argv[1]); sys.exit(3)", "{port}"]
    a = make(actuators, tmp_path, command=crash)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        a.apply({"aggregated": 1})
        wait_until(lambda: events(a, "start_failed") == 1, 20, "the failed start to be seen")
    (line,) = [r.getMessage() for r in caplog.records if "before it was ready" in r.getMessage()]
    assert "exited with 3" in line and "bad flag --port" in line
    assert a.replicas == []


def test_a_replica_that_crashes_while_serving_is_replaced(actuators, tmp_path, caplog) -> None:
    a = make(actuators, tmp_path)
    a.apply({"aggregated": 2})
    wait_until(lambda: len(ready(a)) == 2, 60, "two ready replicas")
    victim = a.replicas[0]
    (engine,) = [p for p in descendants(victim.proc.pid)]  # the emulator under the watchdog
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        os.kill(engine, signal.SIGKILL)
        wait_until(lambda: events(a, "crashed") == 1, 20, "the crash to be seen")
        assert victim.port not in targets(a.targets_file).get("aggregated", [])
        wait_until(lambda: len(ready(a)) == 2 and victim not in a.replicas, 60, "a replacement to be ready")
    (line,) = [r.getMessage() for r in caplog.records if "while serving" in r.getMessage()]
    assert f"port {victim.port} exited with" in line and "replacing it" in line
    assert not alive(engine) and len(targets(a.targets_file)["aggregated"]) == 2


def test_unknown_pool_in_targets_is_an_actuation_error_naming_it(actuators, tmp_path) -> None:
    from planner.actuators.errors import ActuationError

    a = make(actuators, tmp_path)
    with pytest.raises(ActuationError, match="pool decode: not a pool of policy proc"):
        a.apply({"decode": 1})
    assert a.replicas == []


@pytest.mark.parametrize("ports, warned", [((40000, 40010), True), ((20000, 20010), False), ((32000, 32768), True)],
                         ids=["inside", "below", "touching"])
def test_a_port_range_among_the_ephemeral_ports_is_said_once(actuators, tmp_path, caplog, ports, warned) -> None:
    from planner.actuators.replica import ephemeral_range

    if ephemeral_range() != (32768, 60999):
        pytest.skip(f"this machine's ephemeral range is {ephemeral_range()}, the table assumes Linux's default")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        make(actuators, tmp_path, port_range=list(ports))
    said = [r.getMessage() for r in caplog.records if "ephemeral ports" in r.getMessage()]
    assert len(said) == (1 if warned else 0)
