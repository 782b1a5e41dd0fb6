"""The router (`planner route`) in front of engine emulators: least outstanding requests, SSE passed through as
it arrives, retries before the first byte, a clean error after it, 4xx passed on, the two-step
prefill-then-decode route, exactly the replicas in targets.json, /health, /metrics and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from planner.actuators.file_sd import Target, write_targets
from planner.cli import run
from planner.router.app import create_router_app
from planner.service.background import BackgroundServer
from planner.types import Mode
from tests.support.process_fixtures import (
    EMULATED_PROFILE,
    emulator,
    emulator_command,
    port_range,
    sample,
    sample_sum,
    stream,
    wait_until,
)


def router(made: list[BackgroundServer], tmp_path: Path, mode: Mode, replicas: list[tuple[str, str]]):  # noqa: ANN201
    """A router on a targets.json listing (address, pool) pairs; returns (server, its Backends)."""
    path = tmp_path / "targets.json"
    write_targets(path, [Target(address, pool) for address, pool in replicas])
    app = create_router_app(path, mode)
    server = BackgroundServer(app, port=0).start()
    made.append(server)
    return server, app.state.backends


def addr(s: BackgroundServer) -> str:
    return f"127.0.0.1:{s.port}"


def test_streams_pass_through_as_they_arrive_and_spread_least_outstanding(servers, tmp_path) -> None:
    engines = [emulator(servers), emulator(servers)]
    r, backends = router(servers, tmp_path, Mode.AGGREGATED, [(addr(e), "aggregated") for e in engines])
    arrivals: list[float] = []
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(
        stream(r.url, "one two three " * 10, 80, on_chunk=lambda s: arrivals.append(time.monotonic()))))
        for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: sum(b.outstanding for b in backends.by_address.values()) == 4, 10, "4 in flight")
    assert sorted(b.outstanding for b in backends.by_address.values()) == [2, 2]  # least outstanding: 2 and 2
    for t in threads:
        t.join(30)
    assert len(results) == 4 and all(s.done and s.completion_tokens == 80 and s.error is None for s in results)
    # Relayed chunk by chunk, not buffered: the chunks of the four streams arrive over seconds.
    assert len(arrivals) >= 4 * 80 and arrivals[-1] - arrivals[0] > 1.0
    assert sample(r.url, "planner_router_requests_total", endpoint="completions", outcome="ok") == 4
    assert all(sample(r.url, "planner_router_outstanding", pool="aggregated", replica=addr(e)) == 0 for e in engines)


@pytest.mark.parametrize("path, body, key", [
    pytest.param("/v1/completions", {"prompt": "hello there", "max_tokens": 5}, "text", id="completion"),
    pytest.param("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi you"}], "max_tokens": 5},
                 "message", id="chat"),
])
def test_whole_answers_pass_through(servers, tmp_path, path, body, key) -> None:
    e = emulator(servers)
    r, _ = router(servers, tmp_path, Mode.AGGREGATED, [(addr(e), "aggregated")])
    direct = httpx.post(e.url + path, json=body, timeout=30).json()
    routed = httpx.post(r.url + path, json=body, timeout=30)
    assert routed.status_code == 200 and routed.headers["content-type"].startswith("application/json")
    got = routed.json()
    assert got["usage"] == direct["usage"] and key in got["choices"][0]


def test_a_dead_replica_is_retried_on_another_and_no_request_fails(servers, tmp_path) -> None:
    e = emulator(servers)
    dead = f"127.0.0.1:{port_range(1)[0]}"  # nothing listens there
    r, backends = router(servers, tmp_path, Mode.AGGREGATED, [(dead, "aggregated"), (addr(e), "aggregated")])
    replies = [httpx.post(r.url + "/v1/completions", json={"prompt": "a b", "max_tokens": 2}, timeout=30)
               for _ in range(4)]
    assert [x.status_code for x in replies] == [200] * 4
    tried_dead = backends.by_address[dead].sent
    assert tried_dead >= 1  # it was tried (least outstanding alternates) and every such request was retried
    assert sample(r.url, "planner_router_errors_total", pool="aggregated", kind="connect") == tried_dead
    assert sample(r.url, "planner_router_retries_total", pool="aggregated") == tried_dead


def test_a_replica_that_dies_mid_stream_fails_that_request_cleanly(servers, tmp_path) -> None:
    port = port_range(1)[0]
    command = [a.replace("{port}", str(port)) for a in emulator_command(time_scale=20.0)]
    engine = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(port), 60, "the emulator process")
        r, _ = router(servers, tmp_path, Mode.AGGREGATED, [(f"127.0.0.1:{port}", "aggregated")])
        first = threading.Event()
        result: dict = {}
        t = threading.Thread(target=lambda: result.update(s=stream(r.url, "a b c", 400, on_chunk=lambda s: first.set())))
        t.start()
        assert first.wait(30)
        engine.send_signal(signal.SIGKILL)
        t.join(30)
    finally:
        engine.kill()
        engine.wait(10)
    s = result["s"]
    assert s.status == 200 and 0 < len(s.chunks) < 400 and not s.done  # a half answer, not a success
    assert s.error is not None and s.error["code"] == 502 and "mid-stream" in s.error["message"]
    assert sample(r.url, "planner_router_errors_total", pool="aggregated", kind="mid_stream") == 1
    assert sample(r.url, "planner_router_requests_total", endpoint="completions", outcome="failed") == 1
    assert sample(r.url, "planner_router_outstanding", pool="aggregated", replica=f"127.0.0.1:{port}") == 0


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_engines_4xx_is_passed_on_and_not_retried(servers, tmp_path) -> None:
    engines = [emulator(servers), emulator(servers)]
    r, backends = router(servers, tmp_path, Mode.AGGREGATED, [(addr(e), "aggregated") for e in engines])
    got = httpx.post(r.url + "/v1/completions", json={"prompt": "a", "max_tokens": 0}, timeout=30)
    assert got.status_code == 400 and "max_tokens" in got.json()["error"]["message"]
    assert sum(b.sent for b in backends.by_address.values()) == 1
    assert sample(r.url, "planner_router_requests_total", endpoint="completions", outcome="client_error") == 1


def test_disaggregated_requests_prefill_one_token_then_stream_from_decode(servers, tmp_path) -> None:
    pre, dec = emulator(servers, "prefill"), emulator(servers, "decode")
    r, _ = router(servers, tmp_path, Mode.DISAGGREGATED, [(addr(pre), "prefill"), (addr(dec), "decode")])
    s = stream(r.url, "w " * 150, 20)
    assert s.done and s.completion_tokens == 20
    chat = httpx.post(r.url + "/v1/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": "w " * 40}], "max_completion_tokens": 7})
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 7
    # The prefill replica answered two requests of exactly one token each; the decode replica the real ones.
    assert sample(pre.url, "vllm:request_generation_tokens_sum") == 2
    assert sample(pre.url, "vllm:request_generation_tokens_count") == 2
    assert sample(pre.url, "vllm:request_prompt_tokens_sum") == sample(dec.url, "vllm:request_prompt_tokens_sum")
    assert sample(dec.url, "vllm:request_generation_tokens_sum") == 20 + 7


def test_routes_to_exactly_the_listed_replicas_and_health_follows_the_file(servers, tmp_path) -> None:
    a, b = emulator(servers), emulator(servers)
    r, backends = router(servers, tmp_path, Mode.AGGREGATED, [])
    assert httpx.get(r.url + "/health", timeout=5).status_code == 503
    none = httpx.post(r.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
    assert none.status_code == 503 and "no aggregated replica in rotation" in none.json()["error"]["message"]
    write_targets(tmp_path / "targets.json", [Target(addr(a), "aggregated")])
    wait_until(lambda: httpx.get(r.url + "/health", timeout=5).status_code == 200, 5, "health")
    for _ in range(3):
        assert httpx.post(r.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=10).is_success
    assert [x["address"] for x in httpx.get(r.url + "/router/replicas", timeout=5).json()["replicas"]] == [addr(a)]
    assert sample_sum(a.url, "vllm:request_success_total") == 3
    assert sample_sum(b.url, "vllm:request_success_total") == 0  # never listed, never used
    assert httpx.get(r.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "emu"


def test_bad_request_bodies_get_400_and_a_broken_targets_file_keeps_the_rotation(servers, tmp_path, caplog) -> None:
    e = emulator(servers)
    r, backends = router(servers, tmp_path, Mode.AGGREGATED, [(addr(e), "aggregated")])
    for content in (b"{not json", b"[1, 2]"):
        got = httpx.post(r.url + "/v1/completions", content=content, timeout=5)
        assert got.status_code == 400 and got.json()["error"]["type"] == "router_error"
    (tmp_path / "targets.json").write_text('[{"targets": ["127.0.0.1:1"]}]')  # no pool label
    time.sleep(0.5)
    assert backends.in_rotation("aggregated") == 1
    assert any("labels.pool" in rec.getMessage() for rec in caplog.records)


def test_route_command_needs_the_process_actuator(tmp_path, capsys) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(json.dumps({"name": "k", "profile": str(EMULATED_PROFILE), "mode": "aggregated",
                                  "pools": {"aggregated": {}}, "actuator": {"kind": "dry-run"}}))
    assert run(["route", "--policy", str(policy), "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "actuator.kind" in err and "'dry-run'" in err and "Traceback" not in err


def test_a_pool_of_one_gets_its_retries_on_the_same_replica_then_a_clean_502(servers, tmp_path) -> None:
    dead = f"127.0.0.1:{port_range(1)[0]}"
    r, backends = router(servers, tmp_path, Mode.AGGREGATED, [(dead, "aggregated")])
    got = httpx.post(r.url + "/v1/completions", json={"prompt": "a", "max_tokens": 1}, timeout=30)
    assert got.status_code == 502
    assert "3 attempts on 1 aggregated replica(s) failed" in got.json()["error"]["message"]
    assert backends.by_address[dead].sent == 3 and backends.by_address[dead].outstanding == 0
    assert sample(r.url, "planner_router_retries_total", pool="aggregated") == 2
    assert sample(r.url, "planner_router_requests_total", endpoint="completions", outcome="failed") == 1


def test_route_command_serves_the_replicas_of_the_policys_targets_file(servers, tmp_path) -> None:
    import sys

    e = emulator(servers)
    state = tmp_path / "state"
    policy = tmp_path / "p.yaml"
    policy.write_text(json.dumps({"name": "k", "profile": str(EMULATED_PROFILE), "mode": "aggregated",
                                  "pools": {"aggregated": {}}, "actuator": {
                                      "kind": "process", "command": ["x", "{port}"], "port_range": [1, 2],
                                      "state_dir": "state"}}))  # relative: to the policy's folder
    port = port_range(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "route", "--policy", str(policy), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(url + "/health") == 503, 60, "the router to answer (no replicas yet)")
        write_targets(state / "targets.json", [Target(addr(e), "aggregated")])
        wait_until(lambda: _status(url + "/health") == 200, 10, "the replica in rotation")
        assert httpx.post(url + "/v1/completions", json={"prompt": "a b", "max_tokens": 2}, timeout=30).is_success
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn shuts down, then re-raises the signal it caught


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None
