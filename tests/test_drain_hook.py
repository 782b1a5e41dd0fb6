"""The preStop drain `planner init` renders into engine pods, run as the kubelet would run it (the exec
command, as rendered) against a `planner emulate` engine: it returns only once the engine's requests in
flight have ended, within its bound, at once for an idle or exited engine, and an LWS worker's hook waits
on its leader (LWS_LEADER_ADDRESS)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from planner.requests.drain_hook import pre_stop
from planner.sources.dialects import get_dialect
from planner.testing.ports import free_port
from tests.support.endpoint_fixtures import EmulatorProcess, running_requests
from tests.support.process_fixtures import EMULATED_PROFILE, stream, wait_until

GAUGES = get_dialect("vllm").in_system_gauges  # what the emulator exports


def hook(port: int, drain_s: float, host_env: str = "", env: dict[str, str] | None = None) -> subprocess.Popen:
    argv = pre_stop(port, GAUGES, host_env=host_env, drain_s=drain_s, delay_s=0,
                    python=sys.executable)["preStop"]["exec"]["command"]
    return subprocess.Popen(argv, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def engine():  # noqa: ANN201 - EmulatorProcess
    with EmulatorProcess(EMULATED_PROFILE, time_scale=10, model_name="emu") as e:
        yield e


@pytest.mark.parametrize("lws_worker", [False, True], ids=["serving", "lws-worker"])
def test_the_hook_returns_when_the_last_request_in_flight_ends(engine, lws_worker: bool) -> None:
    results: list = []
    client = threading.Thread(target=lambda: results.append(stream(engine.url, "a b c " * 10, 150)))
    client.start()
    wait_until(lambda: running_requests(engine.url) >= 1, 10, "the request in flight")
    started = time.monotonic()
    proc = hook(engine.port, 60, *(("LWS_LEADER_ADDRESS", {"LWS_LEADER_ADDRESS": "127.0.0.1"}) if lws_worker
                                   else ()))
    time.sleep(1.5)
    assert proc.poll() is None and client.is_alive()  # still draining: SIGTERM not yet
    client.join(60)
    ended = time.monotonic()
    assert proc.wait(15) == 0
    assert time.monotonic() - ended < 5  # two idle reads a second apart, not the whole bound
    assert results[0].status == 200 and results[0].done and results[0].completion_tokens == 150
    assert ended - started > 1.5


def test_gauges_the_engine_does_not_export_are_waited_out_not_read_as_idle(engine) -> None:
    argv = pre_stop(engine.port, ("no_such_gauge",), drain_s=2, delay_s=0, python=sys.executable)["preStop"]
    started = time.monotonic()
    assert subprocess.run(argv["exec"]["command"], timeout=20).returncode == 0
    assert time.monotonic() - started > 1.5


def test_the_hook_is_bounded_by_drain_s(engine) -> None:
    client = threading.Thread(target=lambda: stream(engine.url, "a b", 200))
    client.start()
    wait_until(lambda: running_requests(engine.url) >= 1, 10, "the request in flight")
    started = time.monotonic()
    assert hook(engine.port, 2).wait(20) == 0
    assert 1.5 < time.monotonic() - started < 6 and client.is_alive()  # gave up at its bound, request still on
    client.join(60)


@pytest.mark.parametrize("exited", [False, True], ids=["idle", "exited"])
def test_an_idle_or_exited_engine_lets_sigterm_come_at_once(engine, exited: bool) -> None:
    port = free_port() if exited else engine.port  # nothing listens there: an engine that has exited
    started = time.monotonic()
    assert hook(port, 60).wait(20) == 0
    assert time.monotonic() - started < 5
