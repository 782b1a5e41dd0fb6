"""Scale to zero at the router (`planner route`, router/hold.py): a request that finds no replica in rotation is
held (bounded queue, bounded wait, 503 with Retry-After past either, counted), released in arrival order when a
replica enters rotation, and the router's wake signal makes the controller (`planner run`) wake a policy at zero
at once instead of at its next tick. Real router, real emulator engines, real controller."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from planner.actuators.file_sd import Target, write_targets
from planner.router.app import Hold, create_router_app
from planner.router.hold import Holding
from planner.service.background import BackgroundServer
from planner.telemetry import RouterMetrics
from planner.types import Mode
from tests.support.loop_fixtures import loop_policy
from tests.support.process_fixtures import (
    EMULATED_PROFILE,
    emulator,
    emulator_command,
    port_range,
    sample,
    sample_sum,
    targets,
    wait_until,
)

BODY = {"prompt": "one two three", "max_tokens": 4, "ignore_eos": True}


def _emulator(made: list[BackgroundServer], role: str = "aggregated") -> str:
    return f"127.0.0.1:{emulator(made, role).port}"


def _router(made: list[BackgroundServer], path: Path, mode: Mode, hold: Hold) -> BackgroundServer:
    write_targets(path, [])
    s = BackgroundServer(create_router_app(path, mode, hold=hold), port=0).start()
    made.append(s)
    return s


def _post_in_thread(url: str, out: list) -> threading.Thread:  # noqa: ANN001
    def go() -> None:
        r = httpx.post(f"{url}/v1/completions", json=BODY, timeout=60)
        out.append((r.status_code, r.headers.get("retry-after"), time.monotonic()))
    t = threading.Thread(target=go)
    t.start()
    return t


# ------------------------------------------------------------------------------- the queue itself (asyncio)
async def _admit_all(n: int, max_held: int, timeout_s: float, wake_after_s: float | None) -> tuple[list, list]:
    rotation = {"prefill": 0, "decode": 0}
    order: list[int] = []
    refused: list[str] = []
    holding = Holding(["prefill", "decode"], rotation.__getitem__, RouterMetrics(), max_held=max_held,
                      timeout_s=timeout_s)

    async def one(i: int) -> None:
        got = await holding.admit()
        (order.append(i) if got is None else refused.append(f"{i}:{got.why}"))

    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(one(i)))
        await asyncio.sleep(0.01)  # arrivals in order
    if wake_after_s is not None:
        await asyncio.sleep(wake_after_s)
        rotation["prefill"] = 1
        assert holding.release() == 0  # decode still has none: prefill and decode wake together
        rotation["decode"] = 1
        holding.release()
    await asyncio.gather(*tasks)
    return order, refused


@pytest.mark.parametrize(("n", "max_held", "timeout_s", "wake_after_s", "order", "refused"), [
    (5, 10, 5.0, 0.1, [0, 1, 2, 3, 4], []),  # released oldest first
    (5, 3, 5.0, 0.1, [0, 1, 2], ["3:queue_full", "4:queue_full"]),  # the queue's bound
    (3, 10, 0.2, None, [], ["0:timeout", "1:timeout", "2:timeout"]),  # nobody wakes it: each wait's bound
])
def test_held_requests_go_in_arrival_order_within_the_bounds(n, max_held, timeout_s, wake_after_s, order,
                                                             refused) -> None:  # noqa: ANN001
    assert asyncio.run(_admit_all(n, max_held, timeout_s, wake_after_s)) == (order, refused)


# ------------------------------------------------------------------------------- the router over HTTP
def test_a_held_request_is_served_when_a_replica_enters_rotation(servers, tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "targets.json"
    r = _router(servers, path, Mode.AGGREGATED, Hold(10, 30.0))
    out: list = []
    threads = [_post_in_thread(r.url, out) for _ in range(3)]
    wait_until(lambda: sample(r.url, "planner_router_held") == 3, 10, "three requests held")
    assert out == []  # nothing answered while no replica is in rotation
    entered = time.monotonic()
    write_targets(path, [Target(_emulator(servers), "aggregated")])  # what the actuator writes once it is ready
    for t in threads:
        t.join(30)
    assert [code for code, _, _ in out] == [200, 200, 200] and all(at >= entered for _, _, at in out)
    assert sample(r.url, "planner_router_held") == 0
    assert sample(r.url, "planner_router_held_requests_total") == 3
    assert sample(r.url, "planner_router_hold_seconds_count") == 3
    assert sample_sum(r.url, "planner_router_hold_refused_total") == 0


@pytest.mark.parametrize(("hold", "n", "why"), [
    (Hold(10, 0.5), 1, "timeout"),
    (Hold(1, 30.0), 2, "queue_full"),  # the second one finds the queue full at once
])
def test_past_the_bounds_a_request_gets_503_with_retry_after(servers, tmp_path, hold, n, why) -> None:  # noqa: ANN001
    r = _router(servers, tmp_path / "targets.json", Mode.DISAGGREGATED, hold)
    out: list = []
    threads = [_post_in_thread(r.url, out) for _ in range(n)]
    wait_until(lambda: len(out) >= 1, 10, "a refusal")
    code, retry_after, _ = out[0]
    assert code == 503 and retry_after is not None and int(retry_after) > 0
    assert sample(r.url, "planner_router_hold_refused_total", why=why) == 1
    assert sample(r.url, "planner_router_requests_total", endpoint="completions", outcome="failed") == 1
    write_targets(tmp_path / "targets.json", [Target(_emulator(servers, "prefill"), "prefill"),
                                               Target(_emulator(servers, "decode"), "decode")])
    for t in threads:
        t.join(30)
    assert sorted(c for c, _, _ in out) == ([200, 503] if n == 2 else [503])


@pytest.mark.parametrize(("args", "message"), [
    (["--hold-queue", "-1"], "--hold-queue -1: must be >= 0"),
    (["--hold-timeout-s", "-5"], "--hold-timeout-s -5: must be > 0"),
    (["--hold-timeout-s", "nan"], "--hold-timeout-s nan: must be > 0"),
    (["--wake-url", "controller:8080"], "--wake-url 'controller:8080': must be an http"),
])
def test_bad_hold_flags_are_one_line_and_exit_2(tmp_path, args, message) -> None:  # noqa: ANN001
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump(loop_policy("bad", "aggregated", EMULATED_PROFILE, {"aggregated": {}},
                                                 {"command": emulator_command(), "port_range": [20000, 20010]})))
    done = subprocess.run([sys.executable, "-m", "planner.cli", "route", "--policy", str(policy),
                           *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr


# ------------------------------------------------------------------------------- the wake, end to end
@pytest.mark.slow
def test_the_first_request_wakes_a_policy_at_zero_at_once(tmp_path) -> None:  # noqa: ANN001
    """`planner run` (process actuator, no metrics: every read is no data, as at zero with no series) ticks every
    300 s; the policy starts at zero. A request to `planner route --wake-url` is held, the router's signal makes
    the controller tick now, the engine starts, and the request is served long before the next tick."""
    engines, (api_port, router_port, *_) = port_range(), port_range(4)
    state = tmp_path / "state"
    policy = loop_policy("sleepy", "aggregated", EMULATED_PROFILE, {"aggregated": {"min_replicas": 0}},
                         {"command": emulator_command(), "port_range": list(engines), "state_dir": str(state),
                          "drain_s": 5, "stop_grace_s": 5}, interval_s=300, scale_to_zero_after_s=60)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    log = open(tmp_path / "procs.log", "wb")  # noqa: SIM115
    controller = subprocess.Popen([sys.executable, "-m", "planner.cli", "run", "--policy", str(path), "--port",
                                   str(api_port), "--grpc-port", "0", "--metrics-url", "http://127.0.0.1:1",
                                   "--host", "127.0.0.1"], stdout=log, stderr=log)
    router = subprocess.Popen([sys.executable, "-m", "planner.cli", "route", "--policy", str(path), "--port",
                               str(router_port), "--wake-url", f"http://127.0.0.1:{api_port}",
                               "--hold-timeout-s", "120"], stdout=log, stderr=log)
    api, url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{router_port}"
    try:
        wait_until(lambda: _up(api + "/healthz") and _up(url + "/metrics"), 60, "controller and router up")
        wait_until(lambda: _ticks(api) >= 1, 30, "the controller's first tick")
        time.sleep(2)
        assert targets(state / "targets.json").get("aggregated", []) == []  # at zero, and nothing wakes it alone
        ticks_before = _ticks(api)
        r = httpx.post(f"{url}/v1/completions", json=BODY, timeout=150)  # held 120 s at most, then 503
        assert r.status_code == 200, r.text
        assert _ticks(api) == ticks_before + 1  # the wake's own tick: the next grid tick is 300 s away
        decisions = httpx.get(api + "/v1/decisions", timeout=10).json()["decisions"]
        assert decisions[-1]["decision"]["pools"]["aggregated"]["replicas"] == 1
        assert "wake_together" in decisions[-1]["decision"]["reasons"]
        assert decisions[-1]["observation"] == {"pools": {}, "waiting_at_router": 1}  # no series: the router's word
        assert sample(url, "planner_router_wake_signals_total", outcome="ok") == 1
        assert sample(url, "planner_router_held_requests_total") == 1
    finally:
        for p in (router, controller):
            p.terminate()
        for p in (router, controller):
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        log.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def _ticks(api: str) -> float:
    return sample_sum(api, "planner_tick_duration_seconds_count")
