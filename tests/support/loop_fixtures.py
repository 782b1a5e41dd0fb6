"""The closed loop on local engines, as a user runs it: `planner run` (in-process Service) with the process
actuator, `planner route`'s router, and a real Prometheus that scrapes the engines through the actuator's
file_sd targets.json and the controller's own /metrics.

``from tests.support.loop_fixtures import ClosedLoop``.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from planner.actuators.file_sd import write_targets
from planner.actuators.process import ProcessActuator
from planner.policy_file import load_policy
from planner.router.app import create_router_app
from planner.service.background import BackgroundServer
from planner.service.runner import RunOptions, Service
from planner.testing.local_prometheus import LocalPrometheus, Target
from planner.testing.ports import free_port
from planner.types import Decision, Mode, Observation, Reason
from planner.up.tiny_profile import write_tiny_cpu_profile

# Scale-down waits 30 s of lower recommendations: a stall of the whole machine (seen: 15 s of too few requests
# started, 0 req/s at the decision, on a 2-core machine at load average 30 while a replica was starting)
# must not retire the replica that is starting.
FAST_BEHAVIOR = {"scale_up": {"policies": [{"type": "pods", "value": 100, "period_s": 1}]},
                 "scale_down": {"stabilization_window_s": 30, "policies": [{"type": "pods", "value": 100,
                                                                            "period_s": 1}]}}


def loop_policy(name: str, mode: str, profile: Path, pools: Mapping[str, Any], actuator: Mapping[str, Any],
                **over: Any) -> dict[str, Any]:
    """A policy with short intervals and windows so that a closed loop turns in seconds, not minutes."""
    policy: dict[str, Any] = {
        "name": name, "mode": mode, "profile": str(profile), "interval_s": 1, "startup_s": 5,
        "pools": dict(pools), "forecast": {"model": "last-value", "history_s": 120},
        "behavior": copy.deepcopy(FAST_BEHAVIOR), "calibration": {"enabled": False},
        "metrics": {"window_s": 6, "stale_after_intervals": 5,
                    "selectors": {p: f'{{pool="{p}"}}' for p in pools}},
        "actuator": {"kind": "process", **actuator},
    }
    policy.update(over)
    return policy


class ClosedLoop:
    """Prometheus + router + controller around one policy; ``close()`` stops all of it, engines included."""

    def __init__(self, tmp_path: Path, policy: dict[str, Any], prometheus_port: int | None = None) -> None:
        self.state_dir = tmp_path / "state"
        self.targets_file = self.state_dir / "targets.json"
        write_targets(self.targets_file, [])  # Prometheus watches the file from its start
        mode = Mode(policy["mode"])
        router_app = create_router_app(self.targets_file, mode)
        self.backends = router_app.state.backends  # the router's own view (outstanding, sent per replica)
        self.router = BackgroundServer(router_app, port=0).start()
        self.controller_port = free_port()
        self.prom = LocalPrometheus([Target(self.controller_port, {"role": "controller"})],
                                    file_sd=[self.targets_file], port=prometheus_port,
                                    workdir=tmp_path / "prometheus")
        self.prom.start(timeout_s=60)
        policy = copy.deepcopy(policy)
        policy["metrics"]["url"] = self.prom.url
        policy["actuator"].update(state_dir=str(self.state_dir), router_url=self.router.url)
        self.policy_path = tmp_path / "policy.yaml"
        self.policy_path.write_text(yaml.safe_dump(policy))
        self.policy = load_policy(self.policy_path)
        self.service = Service(RunOptions(self.policy_path, host="127.0.0.1", port=self.controller_port,
                                          grpc_port=0)).start()
        self.ticks: list = []  # every TickResult, in order (the test reads decisions and reasons from them)
        self._tick = self.service.loop.tick
        self.service.loop.tick = self._recording_tick  # type: ignore[method-assign]
        self._runner = threading.Thread(target=self.service.run, name="closed-loop", daemon=True)
        self._runner.start()

    def _recording_tick(self):  # noqa: ANN202 - TickResult
        result = self._tick()
        self.ticks.append(result)
        return result

    @property
    def actuator(self) -> ProcessActuator:
        actuator = self.service.loop.actuator
        assert isinstance(actuator, ProcessActuator)
        return actuator

    def ready(self, pool: str) -> list[int]:
        return self.actuator.snapshot()[pool]["ready"]

    def last_decision(self) -> Decision | None:
        last = self.service.loop.last
        return last.decision if last is not None else None

    def deciding_from_data(self) -> bool:
        last = self.service.loop.last
        return bool(last is not None and isinstance(last.observation, Observation) and last.decision is not None
                    and Reason.NO_DATA_HOLD not in last.decision.reasons)

    def query(self, promql: str) -> list[dict]:
        r = httpx.get(f"{self.prom.url}/api/v1/query", params={"query": promql}, timeout=10)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def query_range_max(self, promql: str, since_s: float, until_s: float) -> float | None:
        r = httpx.get(f"{self.prom.url}/api/v1/query_range", timeout=10,
                      params={"query": promql, "start": since_s, "end": until_s, "step": 1})
        r.raise_for_status()
        values = [float(v) for series in r.json()["data"]["result"] for _, v in series["values"]]
        return max(values) if values else None

    def close(self) -> None:
        try:
            self.service.stop_event.set()
            self._runner.join(120)
        finally:
            self.router.stop()
            self.prom.stop()
            logging.getLogger("planner").debug("closed loop stopped")


tiny_cpu_profile = write_tiny_cpu_profile  # the engine tests' name for it
