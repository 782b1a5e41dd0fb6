"""Start and stop everything `planner up` runs on 127.0.0.1: the router, a Prometheus that scrapes the engines
(the process actuator's file_sd targets.json, labelled by pool), the router and the controller, and the
controller itself (`planner run`'s Service) with the process actuator starting the engines."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import httpx
import yaml

from planner.actuators.file_sd import write_targets
from planner.actuators.process import ProcessActuator
from planner.router.app import create_router_app
from planner.service.background import BackgroundServer
from planner.service.loop import TickResult
from planner.service.runner import RunOptions, Service
from planner.testing.local_prometheus import LocalPrometheus, Target
from planner.testing.ports import free_port
from planner.types import Mode
from planner.up.policy import Engines, up_policy

log = logging.getLogger("planner.up")
PORTS = 12  # engine ports: the pools' ceilings, plus replicas still draining while new ones start


def engine_ports(n: int = PORTS) -> tuple[int, int]:
    """``n`` consecutive ports free now (below the kernel's ephemeral range, as free_port picks them)."""
    for _ in range(200):
        first = free_port()
        if all(_bindable(p) for p in range(first + 1, first + n)):
            return first, first + n - 1
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


def _bindable(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Stack:
    """``start()`` brings everything up (engines start under the controller); ``stop()`` ends all of it."""

    def __init__(self, out_dir: Path, engines: Engines) -> None:
        self.out_dir = out_dir
        self.engines = engines
        self.mode = Mode(engines.mode)
        self.state_dir = out_dir / "state"
        self.targets_file = self.state_dir / "targets.json"
        self.policy_path = out_dir / "policy.yaml"
        self.router: BackgroundServer | None = None
        self.prom: LocalPrometheus | None = None
        self.service: Service | None = None
        self.ticks: list[TickResult] = []
        self._runner: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> Stack:
        write_targets(self.targets_file, [])  # Prometheus and the router watch it from their start
        self.router = BackgroundServer(create_router_app(self.targets_file, self.mode), port=0).start()
        controller_port = free_port()
        self.prom = LocalPrometheus([Target(controller_port, {"role": "controller"}),
                                     Target(self.router.port, {"role": "router"})],
                                    file_sd=[self.targets_file], workdir=self.out_dir / "prometheus",
                                    die_with_parent=True)
        self.prom.start(timeout_s=60)
        policy = up_policy(self.engines, prometheus_url=self.prom.url, router_url=self.router.url,
                           state_dir=self.state_dir.resolve(), port_range=engine_ports())
        self.policy_path.write_text(_POLICY_HEADER + yaml.safe_dump(policy, sort_keys=False))
        self.service = Service(RunOptions(self.policy_path, host="127.0.0.1", port=controller_port, grpc_port=0))
        self.service.start()
        loop = self.service.loop
        tick = loop.tick

        def recording_tick() -> TickResult:
            result = tick()
            with self._lock:
                self.ticks.append(result)
            return result

        loop.tick = recording_tick  # type: ignore[method-assign]
        self._runner = threading.Thread(target=self.service.run, name="up-controller", daemon=True)
        self._runner.start()
        return self

    @property
    def policy(self) -> Any:  # noqa: ANN401 - planner.policy_file.PolicyFile
        assert self.service is not None
        return self.service.loop.policy

    @property
    def actuator(self) -> ProcessActuator:
        assert self.service is not None
        actuator = self.service.loop.actuator
        assert isinstance(actuator, ProcessActuator)
        return actuator

    @property
    def controller_url(self) -> str:
        assert self.service is not None and self.service.http is not None
        return self.service.http.url

    def recorded(self) -> list[TickResult]:
        with self._lock:
            return list(self.ticks)

    def query(self, promql: str) -> list[dict]:
        """An instant query on this stack's Prometheus ([] when it cannot answer)."""
        if self.prom is None:
            return []
        try:
            r = httpx.get(f"{self.prom.url}/api/v1/query", params={"query": promql}, timeout=10)
            r.raise_for_status()
            return list(r.json()["data"]["result"])
        except (httpx.HTTPError, ValueError, KeyError):
            return []

    def stop(self) -> None:
        """The controller first (it drains and stops every engine it started), then the router and Prometheus."""
        try:
            if self.service is not None:
                self.service.stop_event.set()
                if self._runner is not None:
                    self._runner.join(180)
                else:
                    self.service.close()
        finally:
            if self.router is not None:
                self.router.stop()
            if self.prom is not None:
                self.prom.stop()


_POLICY_HEADER = """\
# Written by `planner up` for the run it started (planner/up/policy.py says why each value): the example
# policy's model and hardware, short intervals, the process actuator starting the engines below; Prometheus
# (metrics.url) and the router (actuator.router_url) ran on 127.0.0.1. With a Prometheus there, the same file
# runs as it is: planner run --policy THIS_FILE --port 0 --grpc-port 0 --host 127.0.0.1
"""
