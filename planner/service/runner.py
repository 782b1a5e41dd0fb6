"""Assemble and run the long-running controller: loop + HTTP (/metrics, /healthz, /readyz, /v1/desired)
+ KEDA external scaler (gRPC) + optional Lease leader election. Used by ``planner run``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.actuators.desired import DesiredStore
from planner.actuators.factory import load_api_client, make_actuator, needs_api
from planner.actuators.keda_http import desired_router
from planner.actuators.registry import REGISTRY
from planner.actuators.targets import targets_from_policy
from planner.clock import Clock, SystemClock
from planner.errors import UserError
from planner.service.loop import ControlLoop
from planner.service.monitor import MissingSignalMonitor
from planner.telemetry import PlannerMetrics

log = logging.getLogger("planner.run")
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class RunOptions:
    policy_path: Path
    dry_run: bool = False
    once: bool = False
    host: str = "0.0.0.0"
    port: int = 8080
    grpc_port: int = 9090  # 0: no external scaler
    metrics_url: str | None = None
    leader_elect: bool = False
    lease_name: str = "planner"
    lease_namespace: str | None = None
    identity: str | None = None
    lease_duration_s: float | None = None


def build_loop(opts: RunOptions, clock: Clock | None = None, api_client: Any = None,
               metrics: PlannerMetrics | None = None) -> ControlLoop:
    from planner.config import load_policy
    from planner.controller import make_planner_controller
    from planner.profile import load_profile
    from planner.sources.prometheus import PrometheusSource

    policy = load_policy(opts.policy_path)
    if policy.metrics.source != "prometheus":
        raise UserError(f"{opts.policy_path}: key 'metrics.source' = {policy.metrics.source!r}: `planner run` reads "
                        "Prometheus; the simulator source is for `planner backtest`")
    profile = load_profile(policy.profile)
    metrics = metrics or PlannerMetrics()
    store = DesiredStore(policy.name, policy.pool_names())
    if policy.actuator.kind == "kubernetes":
        targets_from_policy(policy)  # bad targets are a config error, reported before any credentials matter
    if (needs_api(policy, opts.dry_run) or opts.leader_elect) and api_client is None:
        api_client = load_api_client()
    actuator = make_actuator(policy, store, dry_run=opts.dry_run, api_client=api_client, metrics=metrics)
    overrides = {"url": opts.metrics_url} if opts.metrics_url else {}
    source = PrometheusSource.from_policy(policy, **overrides)
    elector = None
    if opts.leader_elect:
        from planner.service.leader import LeaseElector

        namespace = opts.lease_namespace or _own_namespace(policy)
        identity = opts.identity or os.environ.get("HOSTNAME") or socket.gethostname()
        duration = opts.lease_duration_s or max(15.0, 3.0 * policy.interval_s)
        elector = LeaseElector(api_client, opts.lease_name, namespace, identity, duration)
    loop = ControlLoop(policy, make_planner_controller(policy, profile), source, actuator, metrics,
                       clock or SystemClock(), monitor=MissingSignalMonitor.for_policy(policy, metrics),
                       store=store, elector=elector)
    loop.actuator_kind = "dry-run" if opts.dry_run else policy.actuator.kind
    return loop


def _own_namespace(policy) -> str:  # noqa: ANN001
    if SA_NAMESPACE.exists():
        return SA_NAMESPACE.read_text().strip()
    return os.environ.get("POD_NAMESPACE") or next(
        (policy.pool(p).target.namespace for p in policy.pool_names() if policy.pool(p).target), "default")


def create_service_app(loop: ControlLoop) -> Any:
    from planner.service.app import create_app

    app = create_app(loop.metrics.registry, loop.monitor.status, title=f"planner {loop.name}")
    kind = loop.actuator_kind
    silent = None if REGISTRY[kind].publishes else (f"actuator kind {kind!r} does not publish desired replicas "
                                                   "(KEDA and HPA read them with kind keda or hpa)")
    app.include_router(desired_router(loop.store, silent))
    return app


class GrpcThread:
    """The KEDA external scaler on its own event loop thread (the control loop is synchronous)."""

    def __init__(self, store: DesiredStore, host: str, port: int) -> None:
        self.store, self.host, self.port = store, host, port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="grpc-external-scaler", daemon=True)

    def _run(self) -> None:
        from planner.actuators.keda_grpc import start_grpc_server

        asyncio.set_event_loop(self._loop)
        try:
            self._server, self.port = self._loop.run_until_complete(
                start_grpc_server(self.store, self.host, self.port))
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._server.stop(1.0))
        self._loop.close()

    def start(self) -> GrpcThread:
        self._thread.start()
        self._ready.wait(20)
        if self._error is not None:
            raise UserError(f"grpc_port {self.port}: cannot start the external scaler ({self._error})", key="grpc_port")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


class Service:
    """The controller with its servers: ``start()`` brings up HTTP and gRPC, ``run()`` ticks until stopped."""

    def __init__(self, opts: RunOptions, api_client: Any = None, clock: Clock | None = None) -> None:
        self.opts = opts
        self.loop = build_loop(opts, clock=clock, api_client=api_client)
        self.stop_event = threading.Event()
        self.http: Any = None
        self.grpc: GrpcThread | None = None

    def start(self) -> Service:
        from planner.service.background import BackgroundServer

        self.http = BackgroundServer(create_service_app(self.loop), host=self.opts.host, port=self.opts.port).start()
        if self.opts.grpc_port:
            try:
                self.grpc = GrpcThread(self.loop.store, self.opts.host, self.opts.grpc_port).start()
            except BaseException:
                self.http.stop()
                self.http = None
                raise
        log.info("planner %s: http on %s:%d%s; actuator %s; every %gs", self.loop.name, self.opts.host,
                 self.http.port, f", grpc on {self.grpc.port}" if self.grpc else "",
                 type(self.loop.actuator).__name__, self.loop.interval_s)
        return self

    def run(self) -> int:
        try:
            return self.loop.run(self.stop_event, wait=self.stop_event.wait)
        finally:
            self.close()

    def close(self) -> None:
        close_actuator = getattr(self.loop.actuator, "close", None)
        if close_actuator is not None:  # the process actuator stops the engines it started
            close_actuator()
        elector = self.loop.elector
        if elector is not None and hasattr(elector, "release"):
            elector.release(self.loop.clock.now_s())
        if self.grpc is not None:
            self.grpc.stop()
            self.grpc = None
        if self.http is not None:
            self.http.stop()
            self.http = None


def serve(opts: RunOptions) -> int:
    """Run until SIGTERM/SIGINT; returns the number of ticks."""
    service = Service(opts)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: service.stop_event.set())
    return service.start().run()
