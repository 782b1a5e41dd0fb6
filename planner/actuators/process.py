"""Actuator kind ``process``: engine replicas as local processes (a workstation, a single GPU box, CI).

``apply(targets)`` sets how many replicas each pool should have and starts or retires the difference at
once; a supervisor thread then keeps it so (README "Running on a workstation"):

- start: the pool's command with ``{port}`` (the lowest free port of ``port_range``; a port some other
  process holds is skipped, said once) and ``{pool}`` substituted, under a watchdog that ends it with the
  controller (procwatch.py); *ready* once /health and /v1/models answer, then listed in targets.json;
- a start that fails (exits, or is not ready within ``ready_timeout_s``) is stopped, counted, said in one
  line, and retried after a back-off that doubles; the pool holds meanwhile;
- a ready replica that exits is counted, said in one line and replaced;
- retire: starting replicas first (newest first, nothing in flight), then the least loaded ready ones
  (the router's outstanding count and the engine's in-system gauges, victims.py; newest among equals), each
  drained (drain.py: out of targets.json and the router, in-flight requests finish, up to ``drain_s``)
  before SIGTERM, and SIGKILL after ``stop_grace_s``;
- ``close()`` drains and stops them all.

Idempotent: the same targets again start and stop nothing and report ``changed=False``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from planner.actuators.drain import RouterView, drain
from planner.actuators.errors import ActuationError
from planner.actuators.file_sd import Target, state_dir_of, targets_path, write_targets
from planner.actuators.replica import Replica, ephemeral_range, port_is_free, substitute
from planner.actuators.settings import ActuatorSettings
from planner.actuators.victims import Candidate, least_loaded
from planner.config import Policy
from planner.types import Applied

if TYPE_CHECKING:
    from planner.telemetry import PlannerMetrics

log = logging.getLogger("planner.actuators.process")

SUPERVISE_S = 0.25
BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 300.0
LOAD_TIMEOUT_S = 1.0  # asking an engine its in-flight count while choosing which replica retires


@dataclass(frozen=True)
class PoolCommand:
    command: tuple[str, ...]
    env: Mapping[str, str]
    min_replicas: int


@dataclass(frozen=True)
class ProcessSettings:
    policy: str
    pools: Mapping[str, PoolCommand]
    port_range: tuple[int, int]
    state_dir: Path
    drain_s: float = 30.0
    stop_grace_s: float = 10.0
    ready_timeout_s: float = 600.0
    router_url: str | None = None
    in_flight_gauges: tuple[str, ...] = ("vllm:num_requests_running", "vllm:num_requests_waiting")

    @classmethod
    def from_policy(cls, policy: Policy, a: ActuatorSettings, in_flight_gauges: tuple[str, ...]) -> ProcessSettings:
        """``in_flight_gauges``: the metric dialect's gauges of requests in the system (what a drain waits on)."""
        assert a.port_range is not None  # required for kind process when the policy file was read
        pools = {}
        for pool in policy.pool_names():
            command, env = a.pool_command(pool.value)
            assert command is not None  # ditto: actuator.command or actuator.pools.<pool>.command
            pools[pool.value] = PoolCommand(tuple(command), env, policy.pool(pool).min_replicas)
        return cls(policy.name, pools, a.port_range, state_dir_of(policy.name, a), a.drain_s,
                   a.stop_grace_s, a.ready_timeout_s, a.router_url, in_flight_gauges)


@dataclass
class _Backoff:
    failures: int = 0
    not_before_s: float = 0.0


class ProcessActuator:
    def __init__(self, settings: ProcessSettings, metrics: PlannerMetrics | None = None,
                 logger: logging.Logger = log) -> None:
        from planner.telemetry import PlannerMetrics

        self.settings = settings
        self.metrics = metrics if metrics is not None else PlannerMetrics()
        self.logger = logger
        self.targets_file = targets_path(settings.state_dir)
        self.router = RouterView(settings.router_url, logger)
        self.desired: dict[str, int] = {}
        self.replicas: list[Replica] = []
        self._lock = threading.RLock()
        self._backoff = {pool: _Backoff() for pool in settings.pools}
        self._taken_ports: set[int] = set()  # said once each, until found free again
        self._no_port: set[str] = set()
        self._workers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._closed = False
        self._check_port_range()

    def _check_port_range(self) -> None:
        """Say once if ``port_range`` overlaps the kernel's ephemeral ports: any program's bind(0) or outgoing
        connection (vLLM's own internal sockets included) may take one while a replica starts, and the
        replica then fails at the very end of its start-up, when it binds its HTTP port."""
        first, last = self.settings.port_range
        ephemeral = ephemeral_range()
        if ephemeral is not None and first <= ephemeral[1] and last >= ephemeral[0]:
            self.logger.warning("actuator.port_range [%d, %d] overlaps the kernel's ephemeral ports [%d, %d] "
                                "(/proc/sys/net/ipv4/ip_local_port_range): other programs may take these ports "
                                "while a replica starts; ports below %d are safer", first, last, *ephemeral,
                                ephemeral[0])

    @classmethod
    def from_policy(cls, policy: Policy, actuator: ActuatorSettings, in_flight_gauges: tuple[str, ...],
                    metrics: PlannerMetrics | None = None) -> ProcessActuator:
        return cls(ProcessSettings.from_policy(policy, actuator, in_flight_gauges), metrics)

    # ------------------------------------------------------------------------------------------ apply
    replicas_source = "the actuator's own processes"  # how the control loop names what read_replicas returns

    def read_replicas(self) -> dict[str, int]:
        """What this actuator holds (it owns the processes, so this is exact): each pool's desired size once
        set, else its live replicas (none before the first apply). Seeds a fresh controller and one that just
        took the lead, as spec.replicas does for the cluster actuators."""
        with self._lock:
            return {p: self.desired.get(p, self._live(p)) for p in self.settings.pools}

    def apply(self, targets: Mapping[str, int]) -> Applied:
        with self._lock:
            if self._closed:
                raise ActuationError(f"process actuator of policy {self.settings.policy}: already closed")
            unknown = [p for p in targets if p not in self.settings.pools]
            if unknown:
                raise ActuationError(f"pool {unknown[0]}: not a pool of policy {self.settings.policy} "
                                     f"(pools: {', '.join(self.settings.pools)})")
            before: dict[str, int | None] = {p: self._live(p) for p in self.settings.pools}
            previous = dict(self.desired)
            after = self._set_desired(targets)
            acted = self._converge()
            # Honest: a new size or a process started/retired now. A pool waiting out a start back-off at
            # the same size is not a change.
            changed = acted or any(previous.get(p) != n for p, n in after.items())
            self._start_supervisor()
        self._publish()
        moves = ", ".join(f"{p} {before[p]}->{n}" for p, n in after.items() if before[p] != n)
        return Applied(before={p: before[p] for p in after}, after=after, changed=changed,
                       detail=f"processes: {moves}" if moves else "processes: unchanged")

    def _set_desired(self, targets: Mapping[str, int]) -> dict[str, int]:
        """The pools' new sizes: the targets given, within the floors; pools never set start at their floor
        (the first ticks of a controller whose engines are not up yet decide nothing for them)."""
        out: dict[str, int] = {}
        for pool, spec in self.settings.pools.items():
            if pool in targets:
                n = int(targets[pool])
                if n < spec.min_replicas:
                    self.logger.warning("pool %s: target %d is below the floor %d; using the floor", pool, n,
                                        spec.min_replicas)
                    n = spec.min_replicas
            elif pool not in self.desired:
                n = spec.min_replicas
            else:
                continue
            self.desired[pool] = out[pool] = n
        return out

    def _live(self, pool: str) -> int:
        return sum(1 for r in self.replicas if r.pool == pool and r.state in ("starting", "ready"))

    # ------------------------------------------------------------------------------------------ converge
    def _converge(self) -> bool:
        """Start or retire replicas until each pool's live count is its desired size; True if it did any."""
        acted = False
        for pool, want in self.desired.items():
            live = [r for r in self.replicas if r.pool == pool and r.state in ("starting", "ready")]
            if len(live) < want:
                acted = self._start(pool, want - len(live)) or acted
            elif len(live) > want:
                self._retire(live, len(live) - want)
                acted = True
        return acted

    def _start(self, pool: str, count: int) -> bool:
        backoff = self._backoff[pool]
        if time.monotonic() < backoff.not_before_s:
            return False
        started = False
        for _ in range(count):
            port = self._free_port(pool)
            if port is None:
                break
            self._launch(pool, port)
            started = True
        return started

    def _launch(self, pool: str, port: int) -> None:
        spec = self.settings.pools[pool]
        command = substitute(spec.command, port, pool)
        replica = Replica(pool, port, command, spec.env, self.settings.state_dir / "logs" / f"{pool}-{port}.log")
        replica.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(replica.log_path, "a") as f:
            f.write(f"--- {datetime.now(UTC).isoformat(timespec='seconds')} planner: {' '.join(command)}\n")
        try:
            replica.launch(self.settings.stop_grace_s)
        except OSError as exc:
            self._start_failed(replica, f"cannot start: {exc}")
            return
        self.replicas.append(replica)
        self._event(pool, "launched")
        self.logger.info("pool %s: starting a replica on port %d (log %s)", pool, port, replica.log_path)

    def _free_port(self, pool: str) -> int | None:
        ours = {r.port for r in self.replicas}
        first, last = self.settings.port_range
        for port in range(first, last + 1):
            if port in ours:
                continue
            if not port_is_free(port):
                if port not in self._taken_ports:
                    self._taken_ports.add(port)
                    self._event(pool, "port_taken")
                    self.logger.warning("port %d of port_range [%d, %d] is taken by another process; skipping it",
                                        port, first, last)
                continue
            self._taken_ports.discard(port)
            self._no_port.discard(pool)
            return port
        if pool not in self._no_port:
            self._no_port.add(pool)
            self._event(pool, "no_free_port")
            self.logger.warning("pool %s: no free port left in port_range [%d, %d]; holding at %d replicas",
                                pool, first, last, self._live(pool))
        return None

    def _retire(self, live: list[Replica], count: int) -> None:
        # Starting ones first (nothing in flight, not routed), newest first; then the least loaded ready ones.
        starting = sorted((r for r in live if r.state == "starting"), key=lambda r: -r.launched_s)
        ready = [r for r in live if r.state == "ready"]
        chosen = starting[:count]
        if count > len(chosen):
            chosen += self._least_loaded(ready, count - len(chosen))
        for replica in chosen:
            was_ready = replica.state == "ready"
            replica.state = "draining"
            self._spawn(self._drain_and_stop if was_ready else self._stop_starting, replica)

    def _least_loaded(self, ready: list[Replica], count: int) -> list[Replica]:
        """The ``count`` ready replicas with the fewest requests in flight (victims.py), newest among equals."""
        if count >= len(ready):  # all of them go: no choice to make, nothing to ask
            return ready
        via_router = self.router.outstanding()
        candidates = [Candidate(r, r.launched_s,
                                via_router.get(r.address, 0.0) if via_router is not None else None,
                                r.in_flight(self.settings.in_flight_gauges, timeout_s=LOAD_TIMEOUT_S))
                      for r in ready]
        chosen = least_loaded(candidates, count)
        loads = ", ".join(f"{c.item.port}: {_load_text(c.load)}" for c in candidates)
        self.logger.info("pool %s: retiring the least loaded ready replica%s, port%s %s (in flight per port: %s)",
                         ready[0].pool, "" if count == 1 else "s", "" if count == 1 else "s",
                         ", ".join(str(r.port) for r in chosen), loads)
        return chosen

    def _spawn(self, target, replica: Replica) -> None:  # noqa: ANN001
        worker = threading.Thread(target=target, args=(replica,), name=f"replica-{replica.port}", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    # ------------------------------------------------------------------------------------------ stop
    def _drain_and_stop(self, replica: Replica) -> None:
        self._publish()  # out of targets.json before anything else: the router and Prometheus drop it
        result = drain(replica, self.router, self.settings.in_flight_gauges, self.settings.drain_s)
        killed = replica.stop(self.settings.stop_grace_s)
        self._forget(replica)
        self._event(replica.pool, "drained" if result.idle else "drain_timeout")
        if killed:
            self._event(replica.pool, "killed")
        left = "nothing in flight" if result.idle else (
            f"{result.in_flight:g} still in flight" if result.in_flight is not None else "in-flight count unknown")
        self.logger.info("pool %s: replica on port %d drained in %.1f s (%s) and stopped%s", replica.pool,
                         replica.port, result.waited_s, left, " (SIGKILL after the grace)" if killed else "")

    def _stop_starting(self, replica: Replica) -> None:
        killed = replica.stop(self.settings.stop_grace_s)
        self._forget(replica)
        if killed:
            self._event(replica.pool, "killed")
        self.logger.info("pool %s: replica on port %d stopped before it was ready (not needed any more)",
                         replica.pool, replica.port)

    def _forget(self, replica: Replica) -> None:
        with self._lock:
            if replica in self.replicas:
                self.replicas.remove(replica)
        self._publish()

    # ------------------------------------------------------------------------------------------ supervise
    def _start_supervisor(self) -> None:
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="process-actuator", daemon=True)
            self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stop.wait(SUPERVISE_S):
            try:
                self.supervise_once()
            except Exception:  # noqa: BLE001 - the supervisor outlives one bad pass; say so, go on
                self.logger.exception("process actuator: supervision pass failed")

    def supervise_once(self) -> None:
        """One pass: promote replicas that answer, fail the ones that cannot start, replace the dead, converge."""
        with self._lock:
            starting = [r for r in self.replicas if r.state == "starting"]
            ready = [r for r in self.replicas if r.state == "ready"]
        answered = {r for r in starting if r.exit_code() is None and r.answers()}  # HTTP outside the lock
        with self._lock:
            if self._closed:
                return
            for replica in starting:
                self._check_starting(replica, replica in answered)
            for replica in ready:
                code = replica.exit_code()
                if code is not None and replica.state == "ready":
                    self._crashed(replica, code)
            self._converge()
        self._publish()

    def _check_starting(self, replica: Replica, answered: bool) -> None:
        if replica.state != "starting":
            return
        code = replica.exit_code()
        waited_s = time.monotonic() - replica.launched_s
        if answered:
            replica.state, replica.ready_s = "ready", waited_s
            self._backoff[replica.pool] = _Backoff()
            self._event(replica.pool, "ready")
            self.logger.info("pool %s: replica on port %d ready after %.1f s", replica.pool, replica.port, waited_s)
        elif code is not None:
            self.replicas.remove(replica)
            replica.stop(self.settings.stop_grace_s)
            self._start_failed(replica, f"exited with {code} before it was ready ({replica.last_log_line()})")
        elif waited_s > self.settings.ready_timeout_s:
            replica.state = "draining"
            self._spawn(self._stop_starting_quietly, replica)
            self._event(replica.pool, "start_timeout")
            self._start_failed(replica, f"not ready within ready_timeout_s {self.settings.ready_timeout_s:g} s",
                               count=False)

    def _stop_starting_quietly(self, replica: Replica) -> None:
        replica.stop(self.settings.stop_grace_s)
        self._forget(replica)

    def _start_failed(self, replica: Replica, why: str, count: bool = True) -> None:
        backoff = self._backoff[replica.pool]
        backoff.failures += 1
        delay_s = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (backoff.failures - 1))
        backoff.not_before_s = time.monotonic() + delay_s
        if count:
            self._event(replica.pool, "start_failed")
        self.logger.warning("pool %s: replica on port %d %s; stopped it (%d failed starts in a row), next try in "
                            "%.0f s; log %s", replica.pool, replica.port, why, backoff.failures, delay_s,
                            replica.log_path)

    def _crashed(self, replica: Replica, code: int) -> None:
        self.replicas.remove(replica)
        # Out of targets.json before the stop's grace period: the router must not send to a dead port meanwhile.
        self._publish()
        replica.stop(self.settings.stop_grace_s)  # whatever the engine left in its group
        self._event(replica.pool, "crashed")
        self.logger.warning("pool %s: replica on port %d exited with %d while serving (%s); replacing it",
                            replica.pool, replica.port, code, replica.last_log_line())

    # ------------------------------------------------------------------------------------------ publish
    def _publish(self) -> None:
        """targets.json lists exactly the ready replicas; the gauges count every state."""
        with self._lock:
            ready = [Target(r.address, r.pool) for r in self.replicas if r.state == "ready"]
            counts = {(p, s): 0 for p in self.settings.pools for s in ("starting", "ready", "draining")}
            for r in self.replicas:
                counts[(r.pool, r.state)] += 1
            write_targets(self.targets_file, ready)
        for (pool, state), n in counts.items():
            self.metrics.engine_replicas.labels(policy=self.settings.policy, pool=pool, state=state).set(n)

    def _event(self, pool: str, event: str) -> None:
        self.metrics.engine_events.labels(policy=self.settings.policy, pool=pool, event=event).inc()

    # ------------------------------------------------------------------------------------------ views, close
    def snapshot(self) -> dict[str, dict[str, list[int]]]:
        """Ports per pool and state, e.g. {"decode": {"ready": [8101], "starting": [], "draining": []}}."""
        with self._lock:
            out: dict[str, dict[str, list[int]]] = {p: {s: [] for s in ("starting", "ready", "draining")}
                                                     for p in self.settings.pools}
            for r in self.replicas:
                out[r.pool][r.state].append(r.port)
        return out

    def draining_replicas(self) -> dict[str, int]:
        """Replicas per pool out of the router's rotation and finishing their work: their GPUs are still held
        (`planner run --fleet` does not grant them again until they are free)."""
        return {pool: len(states["draining"]) for pool, states in self.snapshot().items()}

    def close(self, timeout_s: float | None = None) -> None:
        """Drain and stop every replica (the controller is shutting down); targets.json ends empty."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            self.desired = {p: 0 for p in self.settings.pools}
            self._retire([r for r in self.replicas if r.state in ("starting", "ready")],
                         sum(1 for r in self.replicas if r.state in ("starting", "ready")))
            workers = list(self._workers)
        if self._supervisor is not None:
            self._supervisor.join(5.0)
        limit_s = timeout_s if timeout_s is not None else self.settings.drain_s + self.settings.stop_grace_s + 15.0
        deadline = time.monotonic() + limit_s
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self._publish()


def _load_text(load: float | None) -> str:
    return "unknown" if load is None else f"{load:g}"
