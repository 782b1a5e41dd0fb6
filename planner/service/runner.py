"""Assemble and run the long-running controller: one control loop per policy + one HTTP server (the API of
service/api.py) + the KEDA external scaler (gRPC) + optional Lease leader election. Used by ``planner run``.

Several policies (``planner run --policy A --policy B``) run as one loop each, on its own thread and its own
grid, sharing the metrics registry (every series is labelled by policy), the HTTP and gRPC servers, and one
Lease: the process leads for all of its policies or for none.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from planner.actuators.desired import DesiredStore, DesiredStores
from planner.actuators.factory import load_api_client, make_actuator, needs_api
from planner.actuators.targets import targets_from_policy
from planner.clock import Clock, SystemClock
from planner.errors import UserError
from planner.service.grpc_thread import GrpcThread
from planner.service.loop import ControlLoop, source_name
from planner.service.monitor import MissingSignalMonitor
from planner.service.wake import wait_or_wake
from planner.telemetry import PlannerMetrics

if TYPE_CHECKING:
    from planner.config import Policy
    from planner.service.fleet_loop import FleetLoop
    from planner.service.leader import LeaseElector

log = logging.getLogger("planner.run")
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@runtime_checkable
class Closeable(Protocol):
    """An actuator that holds something the controller must release when it stops (the process actuator:
    the engines it started). The other kinds hold nothing and have no ``close``."""

    def close(self) -> None: ...


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
    lease_duration_s: float | None = None  # None: default_timing's (3 intervals, at least 15 s)
    renew_deadline_s: float | None = None  # None: two thirds of the lease
    retry_period_s: float | None = None  # None: half an interval
    more_policies: tuple[Path, ...] = ()  # planner run --policy A --policy B: B, ...
    api_token: str | None = None  # --api-token-file's content: required on every non-GET request
    fleet_path: Path | None = None  # planner run --fleet: the policies above are its members, on one budget

    @property
    def policy_paths(self) -> tuple[Path, ...]:
        return (self.policy_path, *self.more_policies)


def _load(path: Path) -> tuple[Any, Any]:
    from planner.policy_file import load_policy
    from planner.profile import load_profile

    policy = load_policy(path)
    if policy.metrics.source != "prometheus":
        raise UserError(f"{path}: key 'metrics.source' = {policy.metrics.source!r}: `planner run` reads "
                        "Prometheus; the simulator source is for `planner backtest`")
    if policy.actuator.kind == "kubernetes":
        targets_from_policy(policy, "kubernetes")  # bad targets are a config error, reported before any credentials matter
    return policy, load_profile(policy.profile)


def make_elector(opts: RunOptions, policy: Any, api_client: Any, clock: Clock) -> LeaseElector:
    from planner.service.leader import LeaseElector

    namespace = opts.lease_namespace or _own_namespace(policy)
    identity = opts.identity or os.environ.get("HOSTNAME") or socket.gethostname()
    lease, renew, retry = lease_timing(opts, policy.interval_s)
    return LeaseElector(api_client, opts.lease_name, namespace, identity, lease, clock=clock.now_s,
                        renew_deadline_s=renew, retry_period_s=retry,
                        request_timeout_s=max(0.1, min(5.0, lease / 5.0, lease - renew)))


def lease_timing(opts: RunOptions, interval_s: float) -> tuple[float, float, float]:
    """(lease duration, renew deadline, retry period) for a loop ticking every ``interval_s``, checked."""
    from planner.service.leader import default_timing, timing_problem

    problem = timing_problem(interval_s, opts.lease_duration_s, opts.renew_deadline_s, opts.retry_period_s)
    if problem:
        raise UserError(problem)
    return default_timing(interval_s, opts.lease_duration_s, opts.renew_deadline_s, opts.retry_period_s)


def build_loop(opts: RunOptions, clock: Clock | None = None, api_client: Any = None,
               metrics: PlannerMetrics | None = None, policy_path: Path | None = None,
               elector: LeaseElector | None = None) -> ControlLoop:
    """The loop for one policy (``policy_path``, default the first); ``elector`` shared between loops."""
    return _build_loop(opts, clock, api_client, metrics, policy_path, elector)[0]


def _build_loop(opts: RunOptions, clock: Clock | None, api_client: Any, metrics: PlannerMetrics | None,
                policy_path: Path | None, elector: LeaseElector | None) -> tuple[ControlLoop, LeaseElector | None]:
    """``build_loop``, with the elector it was given or made (``--leader-elect``) for the next policy to share."""
    from planner.controller import make_planner_controller
    from planner.sources.dialects import get_dialect
    from planner.sources.prometheus import PrometheusSource

    policy, profile = _load(policy_path or opts.policy_path)
    clock = clock or SystemClock()
    metrics = metrics or PlannerMetrics()
    store = DesiredStore(policy.name, policy.pool_names())
    acting = needs_api(policy.actuator, opts.dry_run)
    if (acting or opts.leader_elect) and api_client is None:
        api_client = load_api_client()
    elif api_client is None and not opts.dry_run and policy.actuator.kind in ("keda", "hpa"):
        api_client = load_api_client(required=False, in_cluster_only=True)  # to read what KEDA/HPA set
    if opts.leader_elect and elector is None:
        elector = make_elector(opts, policy, api_client, clock)
    context: dict[str, Any] = {"metrics": metrics,
                               "in_flight_gauges": get_dialect(policy.metrics.dialect).in_system_gauges}
    if acting:
        context["on_conflict"] = lambda pool: metrics.actuation_conflicts.labels(policy=policy.name, pool=pool).inc()
        if elector is not None:
            context.update(may_write=elector.may_write, request_timeout_s=elector.request_timeout_s)
    actuator = make_actuator(policy, policy.actuator, store, dry_run=opts.dry_run, api_client=api_client, **context)
    overrides = {"url": opts.metrics_url} if opts.metrics_url else {}
    source = PrometheusSource.from_policy(policy, policy.metrics, **overrides)
    events = None
    if acting:
        from planner.service.events import ScaleEvents

        events = ScaleEvents(api_client, targets_from_policy(policy, policy.actuator.kind), policy.name,
                             instance=(elector.identity if elector is not None else "") or socket.gethostname())
    loop = ControlLoop(policy, make_planner_controller(policy, profile), source, actuator, metrics, clock,
                       monitor=MissingSignalMonitor.for_policy(policy, metrics, source_name(source)),
                       store=store, elector=elector, events=events,
                       actuator_kind="dry-run" if opts.dry_run else policy.actuator.kind, profile=profile)
    return loop, elector


def build_loops(opts: RunOptions, clock: Clock | None = None, api_client: Any = None) -> list[ControlLoop]:
    """One loop per policy, sharing the metrics registry, the clock and (with --leader-elect) one Lease."""
    return _build_loops(opts, clock, api_client)[0]


def _build_loops(opts: RunOptions, clock: Clock | None,
                 api_client: Any) -> tuple[list[ControlLoop], LeaseElector | None]:
    """``build_loops``, with the one elector they share (None without ``--leader-elect``)."""
    clock = clock or SystemClock()
    metrics = PlannerMetrics()
    if opts.leader_elect:  # one Lease for every policy: its timing must suit the slowest loop
        slowest_s = max(_load(path)[0].interval_s for path in opts.policy_paths)
        lease_timing(opts, slowest_s)
    loops: list[ControlLoop] = []
    elector = None
    for path in opts.policy_paths:
        loop, elector = _build_loop(opts, clock, api_client, metrics, path, elector)
        if any(other.name == loop.name for other in loops):
            raise UserError(f"policy {path}: policy name {loop.name!r} is already run by another policy file; "
                            "names label every metric and must differ", key="policy")
        loops.append(loop)
    return loops, elector


def build_fleet_loop(opts: RunOptions, loops: list[ControlLoop]) -> FleetLoop | None:
    """The fleet over ``loops`` (``planner run --fleet``), or None without one."""
    if opts.fleet_path is None:
        return None
    from planner.fleet_file import load_fleet
    from planner.service.fleet_loop import FleetLoop

    return FleetLoop(load_fleet(opts.fleet_path), loops)


def _own_namespace(policy: Policy) -> str:
    if SA_NAMESPACE.exists():
        return SA_NAMESPACE.read_text().strip()
    targets = [t for t in (policy.pool(p).target for p in policy.pool_names()) if t is not None]
    return os.environ.get("POD_NAMESPACE") or (targets[0].namespace if targets else "default")


def create_service_app(loop_or_loops: ControlLoop | list[ControlLoop], token: str | None = None,
                       fleet: FleetLoop | None = None) -> Any:
    from planner.service.api import create_service_app as create

    loops = loop_or_loops if isinstance(loop_or_loops, list) else [loop_or_loops]
    return create(loops, token, title=f"planner {', '.join(loop.name for loop in loops)}", fleet=fleet)


class Service:
    """The controller with its servers: ``start()`` brings up HTTP and gRPC, ``run()`` ticks until stopped."""

    def __init__(self, opts: RunOptions, api_client: Any = None, clock: Clock | None = None) -> None:
        self.opts = opts
        self.loops, self.elector = _build_loops(opts, clock, api_client)  # one Lease for all policies, or none
        self.loop = self.loops[0]
        self.fleet = build_fleet_loop(opts, self.loops)
        self.stop_event = threading.Event()
        self.http: Any = None
        self.grpc: GrpcThread | None = None

    def start(self) -> Service:
        from planner.service.background import BackgroundServer

        app = create_service_app(self.loops, self.opts.api_token, self.fleet)
        self.http = BackgroundServer(app, host=self.opts.host, port=self.opts.port).start()
        if self.opts.grpc_port:
            try:
                stores = DesiredStores([loop.store for loop in self.loops])
                self.grpc = GrpcThread(stores, self.opts.host, self.opts.grpc_port).start()
            except BaseException:
                self.http.stop()
                self.http = None
                raise
        if self.opts.api_token is None:
            log.warning("no --api-token-file: POST /v1/plan answers anyone who reaches port %d", self.http.port)
        for loop in self.loops:
            log.info("planner %s: http on %s:%d%s; actuator %s; every %gs", loop.name, self.opts.host,
                     self.http.port, f", grpc on {self.grpc.port}" if self.grpc else "",
                     type(loop.actuator).__name__, loop.interval_s)
        return self

    def run(self) -> int:
        """Tick every loop until stopped; returns the ticks run (all policies together)."""
        try:
            if self.fleet is not None:  # one grid: every policy decides, the fleet fits, then each applies
                return self.fleet.run(self.stop_event, wait=self._wait(self.fleet)) * len(self.loops)
            if len(self.loops) == 1:
                return self.loop.run(self.stop_event, wait=self._wait(self.loop))
            counts = [0] * len(self.loops)

            def run_one(i: int) -> None:
                counts[i] = self.loops[i].run(self.stop_event, wait=self._wait(self.loops[i]))

            threads = [threading.Thread(target=run_one, args=(i,), name=f"loop-{loop.name}", daemon=True)
                       for i, loop in enumerate(self.loops)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sum(counts)
        finally:
            self.close()

    def _wait(self, runs: ControlLoop | FleetLoop) -> Callable[[float], None]:
        """Between ticks: until the grid point, a stop (SIGTERM) or the router's wake signal (POST /v1/wake)."""
        return wait_or_wake(self.stop_event, runs.wake_signal.event)

    def close(self) -> None:
        for loop in self.loops:  # every policy's: each process actuator stops the engines it started
            if isinstance(loop.actuator, Closeable):
                loop.actuator.close()
        if self.elector is not None:
            self.elector.release(self.loop.clock.now_s())
        if self.grpc is not None:
            self.grpc.stop()
            self.grpc = None
        if self.http is not None:
            self.http.stop()
            self.http = None


def serve(opts: RunOptions) -> int:
    """Run until SIGTERM/SIGINT; returns the number of ticks."""
    import signal

    service = Service(opts)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: service.stop_event.set())
    return service.start().run()
