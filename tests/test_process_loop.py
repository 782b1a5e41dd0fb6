"""`planner run` with the process actuator, on `planner emulate` engines: no engine outlives the controller
(SIGKILL or SIGTERM), and a Prometheus restart makes the controller hold, say so once, and resume."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.types import NoData, Observation, Reason
from tests.support.loop_fixtures import ClosedLoop, loop_policy
from tests.support.process_fixtures import (
    EMULATED_PROFILE,
    Load,
    alive,
    descendants,
    emulator_command,
    port_range,
    targets,
    wait_until,
)
from tests.support.prom_fixtures import require_prometheus

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_no_engine_outlives_the_controller(tmp_path: Path, sig: int) -> None:
    """SIGKILL: no cleanup code runs in the controller; its engines' watchdogs see it gone and end them.
    SIGTERM: the controller drains and stops them itself, and targets.json ends empty."""
    state = tmp_path / "state"
    policy = loop_policy("orphans", "aggregated", EMULATED_PROFILE, {"aggregated": {"min_replicas": 2}},
                         {"command": emulator_command(), "port_range": list(port_range()), "state_dir": str(state),
                          "drain_s": 5, "stop_grace_s": 5})
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    # No Prometheus: every read is no data, the decision holds, and the actuator starts the floor (2).
    controller = subprocess.Popen([sys.executable, "-m", "planner.cli", "run", "--policy", str(path), "--port", "0",
                                   "--grpc-port", "0", "--metrics-url", "http://127.0.0.1:1", "--host", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=open(tmp_path / "controller.log", "wb"))
    try:
        wait_until(lambda: len(targets(state / "targets.json").get("aggregated", [])) == 2, 90, "two ready engines")
        engines = descendants(controller.pid)
        assert len(engines) == 4, engines  # two watchdogs, each with its engine
        controller.send_signal(sig)
        controller.wait(60)
        wait_until(lambda: not any(alive(p) for p in engines), 30, "every engine process to end")
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(10)
    if sig == signal.SIGTERM:
        assert controller.returncode == 0 and targets(state / "targets.json") == {}
        log = (tmp_path / "controller.log").read_text()
        assert log.count("drained in") == 2, log[-2000:]


@pytest.mark.prometheus
def test_a_prometheus_restart_holds_the_pools_says_so_once_and_resumes(tmp_path: Path, caplog) -> None:
    require_prometheus()
    policy = loop_policy("restart", "aggregated", EMULATED_PROFILE, {"aggregated": {"min_replicas": 1}},
                         {"command": emulator_command(), "port_range": list(port_range()), "drain_s": 5})
    loop = ClosedLoop(tmp_path, policy)
    load = None
    try:
        with caplog.at_level(logging.INFO, logger="planner"):
            wait_until(lambda: loop.ready("aggregated"), 60, "the floor replica")
            # Light traffic: with none ever seen the mean lengths are unknown and the decision holds anyway.
            load = Load(loop.router.url, 2.0, "some words here", 4).start()
            wait_until(loop.deciding_from_data, 90, "decisions from Prometheus data")
            start_up = [r.getMessage() for r in caplog.records]
            caplog.clear()  # the start-up (no engine ready yet) was an outage of its own, said once too
            serving = loop.ready("aggregated")
            loop.prom.shutdown()
            wait_until(lambda: isinstance(loop.ticks[-1].observation, NoData), 20, "a read with no data")
            outage = len(loop.ticks) - 1
            wait_until(lambda: len(loop.ticks) >= outage + 4, 20, "four ticks without Prometheus")
            held = loop.ticks[outage:]
            loop.prom.start(timeout_s=60)
            wait_until(loop.deciding_from_data, 60, "decisions from data again")
        # Seeded from what the actuator holds (its own processes), not guessed from the metrics.
        assert "policy restart: seeded from the actuator's own processes: aggregated=0" in start_up, start_up
        assert not any("cannot read the targets' spec.replicas" in m for m in start_up)
        assert all(isinstance(t.observation, NoData) for t in held)
        assert all(t.decision is not None and t.decision.reasons == (Reason.NO_DATA_HOLD,) for t in held)
        assert all(t.decision.targets() == {"aggregated": len(serving)} for t in held)
        assert all(t.error is None for t in held)  # held, not failed: the loop kept ticking
        assert loop.ready("aggregated") == serving  # not one engine was touched
        messages = [r.getMessage() for r in caplog.records]
        down = [m for m in messages if "holding: no scale-down until it answers" in m]
        back = [m for m in messages if "answering again after" in m]
        assert len(down) == 1 and "unreachable" in down[0]
        assert len(back) == 1
        assert isinstance(loop.ticks[-1].observation, Observation)
        load.stop()
        assert load.results and not load.failures  # Prometheus is not in the request path
    finally:
        if load is not None:
            load.stop()
        loop.close()
    assert loop.actuator.replicas == []
