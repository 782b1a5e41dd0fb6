"""The control loop: every ``interval_s`` read -> decide -> actuate -> export, and never crash.

It is the only place in the planner that reads the clock (an injected ``Clock``). Ticks are scheduled on
a fixed grid ``start + k * interval_s``; a tick that overruns skips the grid points it missed instead of
running back to back (INTEGRATION.md §7: no overlap, no burst of catch-up ticks after a stall).

Failure policy, per stage (every failure is counted in ``planner_errors_total{kind}`` and logged):
- read fails or returns NoData: the controller gets the NoData and holds (missing data never scales down);
  one log line per outage; the missing-signal monitor turns readiness degraded after the policy's number
  of intervals;
- the controller raises: no decision this tick (kind ``decide``), nothing is applied;
- the actuator raises: kind ``actuate``; the same decision is applied again next tick (actuators are
  idempotent, so a retry is exactly a re-apply); a write refused because the Lease may have expired is
  kind ``leader``.

Seeding (service/seed.py): before the first decision it acts on - at start and again on every takeover of
the Lease - the loop reads what the targets hold (``actuator.read_replicas()``: the scale subresource's
``spec.replicas``) and seeds the controller's state with it, so the behaviour rules apply from the first
tick. An actuator that cannot read the cluster (None) is seeded from the first observation's ready
replicas instead, and the loop says so once; one whose read fails (kind ``seed``) applies nothing until a
read succeeds.

Every part is passed to the constructor, typed by a protocol below that names what the loop asks of it
(a ``SeedableController``, a ``ReadableActuator``, an ``Elector`` that reports its problem): nothing is
looked up on a part at run time and nothing is set on the loop after it is built.

With leader election a standby keeps reading and keeps the controller's history warm, but neither
publishes nor actuates. A Lease that cannot be taken (403, unreachable) is counted each tick (kind
``leader``) and fails readiness; ``planner_leader`` says who acts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from planner.actuators.desired import DesiredStore
from planner.actuators.errors import LeadershipLost
from planner.clock import Clock
from planner.service.decisions import DecisionLog, tick_record
from planner.service.monitor import MissingSignalMonitor
from planner.service.seed import ready_replicas, seeded_state
from planner.service.wake import WakeSignal, with_waiting
from planner.telemetry import (
    PlannerMetrics,
    record_decision,
    record_error,
    record_observation,
    record_sla,
    record_tick,
)
from planner.types import (
    Actuator,
    Applied,
    Decision,
    LoadForecast,
    MetricSource,
    NoData,
    NoDataReason,
    Observation,
)

if TYPE_CHECKING:
    from planner.decide.state import PlannerState
    from planner.policy_file import PolicyFile
    from planner.profile import Profile

log = logging.getLogger("planner.loop")


class SeedableController(Protocol):
    """controller.PlannerController as the loop drives it: a decision per tick with the load forecast behind
    it (None when it made none; the decision log and telemetry show it), and a decision state the loop seeds
    with what the targets hold before the first decision it acts on."""

    state: PlannerState

    @property
    def last_forecast(self) -> LoadForecast | None: ...

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision: ...


class ReadableActuator(Actuator, Protocol):
    """An actuator that can say what the targets hold (None: it cannot tell; the loop then seeds from the
    ready replicas the metrics show), named in the seeding log line by ``replicas_source``."""

    @property
    def replicas_source(self) -> str: ...  # e.g. "the targets' spec.replicas"

    def read_replicas(self) -> dict[str, int] | None: ...


class Elector(Protocol):  # service.leader.LeaseElector as the loop uses it
    @property
    def problem(self) -> str | None: ...  # why the Lease cannot be taken or renewed (403, unreachable), or None

    def step(self, now_s: float) -> bool: ...


class EventRecorder(Protocol):  # service.events.ScaleEvents
    def record(self, decision: Decision, applied: Applied, observation: Observation | NoData,
               now_s: float) -> int: ...


@dataclass(frozen=True)
class TickResult:
    at_s: float
    observation: Observation | NoData
    decision: Decision | None = None
    applied: Applied | None = None
    leader: bool = True
    error: str | None = None  # "kind: message" of the stage that failed, None when the tick went through


@dataclass(frozen=True)
class Decided:
    """A tick decided and not yet applied: what ``decide_step`` hands to ``act_step``."""

    observation: Observation | NoData
    decision: Decision


class ControlLoop:
    def __init__(self, policy: PolicyFile, controller: SeedableController, source: MetricSource,
                 actuator: ReadableActuator, metrics: PlannerMetrics, clock: Clock, *,
                 monitor: MissingSignalMonitor | None = None, store: DesiredStore | None = None,
                 elector: Elector | None = None, events: EventRecorder | None = None,
                 decisions: DecisionLog | None = None, actuator_kind: str | None = None,
                 profile: Profile | None = None, logger: logging.Logger = log) -> None:
        """``actuator_kind``: what /v1/policies and KEDA's desired-replicas answer name (default the policy's
        ``actuator.kind``; ``planner run --dry-run`` passes "dry-run"); ``profile``: the policy's profile, which
        POST /v1/plan sizes with (None: loaded from ``policy.profile`` when asked)."""
        self.policy = policy
        self.name = policy.name
        self.interval_s = float(policy.interval_s)
        self.window_s = float(policy.metrics.window_s)
        self.controller = controller
        self.source = source
        self.actuator = actuator
        self.metrics = metrics
        self.clock = clock
        self.monitor = monitor or MissingSignalMonitor.for_policy(policy, metrics, source_name(source))
        self.store = store or DesiredStore(policy.name, policy.pool_names())
        # What this loop decided for each pool, whatever the actuator kind: /v1/desired serves it where nothing
        # is published (dry-run: what keda would publish). Only ``store`` (PublishActuator's) reaches KEDA's gRPC.
        self.decided = DesiredStore(policy.name, policy.pool_names())
        self.elector = elector
        self.events = events
        self.decisions = decisions if decisions is not None else DecisionLog()
        self.in_force: Decision | None = None  # the last decision exported: the sizes serving this window
        self.logger = logger
        self.actuator_kind = actuator_kind or policy.actuator.kind
        self.profile = profile
        self.ticks = 0
        self._read_s: float | None = None
        self._seeded = False  # the controller's state reflects what the targets hold (re-done on takeover)
        self._said_unseedable = False
        self.last: TickResult | None = None
        self.wake_signal = WakeSignal()  # the router's: requests held for want of a replica (service/wake.py)
        record_sla(metrics, self.name, policy.sla.ttft_ms, policy.sla.itl_ms, policy.sla.percentile)
        leads_now = getattr(elector, "leads_now", None)
        if leads_now is not None:
            # Read when scraped, by the local clock: a leader cut off from the API server says 0 as soon as
            # its renew deadline passes, not at its next tick (two replicas said 1 for seconds).
            metrics.leader.labels(policy=self.name).set_function(lambda: 1.0 if leads_now() else 0.0)

    # ------------------------------------------------------------------------------------------ one tick
    def tick(self) -> TickResult:
        started = time.perf_counter()
        now_s = self.clock.now_s()
        result = self.guarded(now_s, lambda: self._tick(now_s))
        assert isinstance(result, TickResult)
        return self.finish(result, started)

    def guarded(self, now_s: float, step: Callable[[], TickResult | Decided]) -> TickResult | Decided:
        """Run one step of a tick; a bug in it is counted and logged and ends the tick, never the loop."""
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one tick's bug; count it, go on
            record_error(self.metrics, self.name, "internal")
            self.logger.exception("policy %s: tick failed", self.name)
            return TickResult(now_s, NoData(NoDataReason.BAD_RESPONSE, "tick failed", now_s), error=f"internal: {exc}")

    def finish(self, result: TickResult, started: float) -> TickResult:
        """Close a tick: its timing, its count, the decision log."""
        record_tick(self.metrics, self.name, time.perf_counter() - started, self._read_s)
        self.ticks += 1
        self.last = result
        if result.decision is not None or result.error:
            self.decisions.append(tick_record(self.name, result.at_s, result.leader, result.observation,
                                              result.decision, self.controller.last_forecast,
                                              result.applied, result.error))
        return result

    def _read(self, now_s: float) -> Observation | NoData:
        started = time.perf_counter()
        try:
            return self.source.read(self.window_s, now_s)
        except Exception as exc:  # noqa: BLE001 - a source must return NoData; one that raises still must not stop us
            return NoData(NoDataReason.UNREACHABLE, f"{type(exc).__name__}: {exc}", now_s)
        finally:
            self._read_s = time.perf_counter() - started

    def _lead(self, now_s: float) -> bool:
        if self.elector is None:
            return True
        leader = self.elector.step(now_s)
        problem = self.elector.problem
        if getattr(self.elector, "leads_now", None) is None:
            self.metrics.leader.labels(policy=self.name).set(1 if leader else 0)
        self.monitor.set_problem("lease", problem)
        if problem is not None:
            record_error(self.metrics, self.name, "leader")
        if not leader:
            self._seeded = False  # whoever leads now moves the targets: re-read them on takeover
        return leader

    def _seed(self, observation: Observation | NoData, now_s: float) -> str | None:
        """Seed the controller from what the targets hold; returns an error to hold on, None when done."""
        if self._seeded:
            return None
        try:
            replicas = self.actuator.read_replicas()
        except Exception as exc:  # noqa: BLE001 - no write before we know what is there
            record_error(self.metrics, self.name, "seed")
            self.logger.warning("policy %s: cannot read the targets' replicas, applying nothing until it can: %s",
                                self.name, exc)
            return f"seed: {exc}"
        source = self.actuator.replicas_source
        if replicas is None:
            if not self._said_unseedable:
                self.logger.warning("policy %s: actuator %s cannot read the targets' spec.replicas (no "
                                    "credentials, no targets, or no permission); seeding from the ready replicas "
                                    "the metrics show, which are fewer while pods start", self.name,
                                    self.actuator_kind)
                self._said_unseedable = True
            if not isinstance(observation, Observation):
                return None  # nothing to seed from yet; the decision holds on NoData anyway
            replicas = ready_replicas(observation, tuple(self.policy.pool_names()))
            source = "the ready replicas"
        if replicas:
            self.controller.state = seeded_state(self.controller.state, replicas, now_s)
            self.logger.info("policy %s: seeded from %s: %s", self.name, source,
                             ", ".join(f"{p}={n}" for p, n in replicas.items()))
        self._seeded = True
        return None

    def _tick(self, now_s: float) -> TickResult:
        step = self.decide_step(now_s)
        return step if isinstance(step, TickResult) else self.act_step(step, now_s)

    def decide_step(self, now_s: float) -> TickResult | Decided:
        """Lead, read, seed and decide: a ``Decided`` to act on, or the tick's result when there is nothing
        to apply (standby, held for seeding, the decision failed). The fleet decides every policy before it
        applies any (service/fleet_loop.py)."""
        self._read_s = None
        leader = self._lead(now_s)
        observation = self._read(now_s)
        self.monitor.observe(observation, now_s)
        waiting = self.wake_signal.take()
        if waiting and self.policy.scales_to_zero():  # a policy that cannot sleep holds on NoData as ever
            observation = with_waiting(observation, waiting, now_s, self.window_s)
        held = self._seed(observation, now_s) if leader else None
        try:
            decision = self.controller.tick(observation, now_s)
        except Exception as exc:  # noqa: BLE001 - a bug in one tick must not stop scaling for good
            record_error(self.metrics, self.name, "decide")
            record_observation(self.metrics, self.name, observation)
            self.logger.exception("policy %s: decide failed; holding", self.name)
            return TickResult(now_s, observation, leader=leader, error=f"decide: {exc}")
        if not leader or held:
            problem = self.elector.problem if self.elector is not None else None
            return TickResult(now_s, observation, decision, leader=leader,
                              error=held or (f"leader: {problem}" if problem else None))
        return Decided(observation, decision)

    def act_step(self, step: Decided, now_s: float) -> TickResult:
        """Export and apply a decision (the fleet's grant, in a fleet)."""
        decision, observation = step.decision, step.observation
        record_decision(self.metrics, self.name, decision, self.controller.last_forecast, observation,
                        in_force=self.in_force, spec=getattr(self.controller, "spec", None))
        self.in_force = decision  # its sizes serve the next window (the model's bias is read against it)
        return self._apply(decision, observation, now_s)

    def _apply(self, decision: Decision, observation: Observation | NoData, now_s: float) -> TickResult:
        targets = decision.targets()
        self.decided.publish(targets)
        try:
            applied = self.actuator.apply(targets)
        except LeadershipLost as exc:
            record_error(self.metrics, self.name, "leader")
            self._seeded = False
            self.logger.warning("policy %s: %s", self.name, exc)
            return TickResult(now_s, observation, decision, leader=False, error=f"leader: {exc}")
        except Exception as exc:  # noqa: BLE001 - ActuationError and anything else: count, log, retry next tick
            record_error(self.metrics, self.name, "actuate")
            self.logger.warning("policy %s: actuation failed (retrying next tick): %s", self.name, exc)
            return TickResult(now_s, observation, decision, leader=True, error=f"actuate: {exc}")
        if any(applied.after.get(p, n) != n for p, n in targets.items()):
            self._seeded = False  # another writer moved a target: the next tick decides from what is there
        if self.events is not None and applied.changed:
            for _ in range(self.events.record(decision, applied, observation, now_s)):
                record_error(self.metrics, self.name, "event")
        self._explain(decision, applied, observation)
        return TickResult(now_s, observation, decision, applied, leader=True)

    def _explain(self, decision: Decision, applied: Applied, observation: Observation | NoData) -> None:
        pools = ", ".join(f"{p}={d.replicas} ({'+'.join(r.value for r in d.reasons) or '-'})"
                          for p, d in decision.pools.items())
        seen = (f"no data ({observation.reason.value})" if isinstance(observation, NoData)
                else ", ".join(f"{p} {o.rate_rps:.2f} rps" for p, o in observation.pools.items()))
        level = logging.INFO if applied.changed else logging.DEBUG
        self.logger.log(level, "policy %s: %s; observed %s; %s", self.name, pools, seen,
                        "applied" if applied.changed else "unchanged")

    # ------------------------------------------------------------------------------------------ wake
    def wake(self, waiting: int) -> bool:
        """The router holds ``waiting`` requests for this policy: the next read sees them. True when the loop
        should tick now (the policy may sleep and a pool of the decision in force is at zero); the caller then
        sets the ``wake_signal.event`` of whatever runs the grid (this loop, or its fleet)."""
        self.wake_signal.note(waiting)
        return self.asleep()

    def asleep(self) -> bool:
        """The policy may sleep and a pool of the decision in force is at zero (or none is in force yet)."""
        if not self.policy.scales_to_zero():
            return False
        return self.in_force is None or any(n == 0 for n in self.in_force.targets().values())

    # ------------------------------------------------------------------------------------------ schedule
    def run(self, stop: threading.Event | None = None, max_ticks: int | None = None,
            wait: Callable[[float], object] | None = None) -> int:
        """Tick on the grid until ``stop`` is set or ``max_ticks`` ran; returns the number of ticks."""
        return run_on_grid(self.tick, self.clock, self.interval_s, stop, max_ticks, wait)


GRID_SLACK_S = 0.05  # a tick this close before its grid point is the grid's


def run_on_grid(tick: Callable[[], object], clock: Clock, interval_s: float, stop: threading.Event | None = None,
                max_ticks: int | None = None, wait: Callable[[float], object] | None = None,
                woken: Callable[[], object] | None = None) -> int:
    """Call ``tick`` on a grid of ``interval_s`` until ``stop`` is set or ``max_ticks`` ran; the tick count.
    A ``wait`` that returns before the grid point (a wake: service/wake.py wait_or_wake) ticks at once, off
    the grid (``woken`` when given, else ``tick``); the grid goes on where it was."""
    stop = stop or threading.Event()
    wait = wait or clock.sleep  # `planner run` passes stop.wait so a signal ends the wait at once
    start_s = clock.now_s()
    k = 0
    due_s = start_s
    ran = 0
    while not stop.is_set() and (max_ticks is None or ran < max_ticks):
        # A wait ends at its grid point by time.monotonic, which may be a few ms ahead of the clock's wall time.
        on_grid = clock.now_s() >= due_s - GRID_SLACK_S
        (tick if on_grid or woken is None else woken)()
        ran += 1
        now_s = clock.now_s()
        if on_grid:  # a wake's tick, before its grid point, keeps the grid as it was
            # The next grid point strictly after now: a tick that overran skips the ones it missed.
            k = max(k + 1, int((now_s - start_s) // interval_s) + 1)
            due_s = start_s + k * interval_s
        if max_ticks is not None and ran >= max_ticks:
            break
        wait(max(0.0, due_s - now_s))
    return ran


def source_name(source: object) -> str:
    """How log lines name the metrics source: "Prometheus" for the Prometheus source, else its class."""
    name = type(source).__name__
    return "Prometheus" if name == "PrometheusSource" else name
