"""The control loop: every ``interval_s`` read -> decide -> actuate -> export, and never crash.

It is the only place in the planner that reads the clock (an injected ``Clock``). Ticks are scheduled on
a fixed grid ``start + k * interval_s``; a tick that overruns skips the grid points it missed instead of
running back to back (INTEGRATION.md §7: no overlap, no burst of catch-up ticks after a stall).

Failure policy, per stage (every failure is counted in ``planner_errors_total{kind}`` and logged):
- read fails or returns NoData: the controller gets the NoData and holds (missing data never scales down);
  the missing-signal monitor turns readiness degraded after the policy's number of intervals;
- the controller raises: no decision this tick (kind ``decide``), nothing is applied;
- the actuator raises: kind ``actuate``; the same decision is applied again next tick (actuators are
  idempotent, so a retry is exactly a re-apply).
With leader election a standby keeps reading and keeps the controller's history warm, but neither
publishes nor actuates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from planner.actuators.desired import DesiredStore
from planner.clock import Clock
from planner.service.monitor import MissingSignalMonitor
from planner.telemetry import PlannerMetrics, record_decision, record_error, record_observation, record_tick
from planner.types import (
    Actuator,
    Applied,
    Controller,
    Decision,
    MetricSource,
    NoData,
    NoDataReason,
    Observation,
)

log = logging.getLogger("planner.loop")


class Elector(Protocol):  # the slice of service.leader.LeaseElector the loop uses
    def step(self, now_s: float) -> bool: ...


@dataclass(frozen=True)
class TickResult:
    at_s: float
    observation: Observation | NoData
    decision: Decision | None = None
    applied: Applied | None = None
    leader: bool = True
    error: str | None = None  # "kind: message" of the stage that failed, None when the tick went through


class ControlLoop:
    def __init__(self, policy, controller: Controller, source: MetricSource, actuator: Actuator,  # noqa: ANN001
                 metrics: PlannerMetrics, clock: Clock, *, monitor: MissingSignalMonitor | None = None,
                 store: DesiredStore | None = None, elector: Elector | None = None,
                 logger: logging.Logger = log) -> None:
        self.policy = policy
        self.name = policy.name
        self.interval_s = float(policy.interval_s)
        self.window_s = float(policy.metrics.window_s)
        self.controller = controller
        self.source = source
        self.actuator = actuator
        self.metrics = metrics
        self.clock = clock
        self.monitor = monitor or MissingSignalMonitor.for_policy(policy, metrics)
        self.store = store or DesiredStore(policy.name, policy.pool_names())
        self.elector = elector
        self.logger = logger
        self.actuator_kind: str = policy.actuator.kind  # what answers KEDA (runner: "dry-run" under --dry-run)
        self.ticks = 0
        self._read_s: float | None = None
        self.last: TickResult | None = None

    # ------------------------------------------------------------------------------------------ one tick
    def tick(self) -> TickResult:
        started = time.perf_counter()
        now_s = self.clock.now_s()
        self._read_s = None
        try:
            result = self._tick(now_s)
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one tick's bug; count it, go on
            record_error(self.metrics, self.name, "internal")
            self.logger.exception("policy %s: tick failed", self.name)
            result = TickResult(now_s, NoData(NoDataReason.BAD_RESPONSE, "tick failed", now_s),
                                error=f"internal: {exc}")
        record_tick(self.metrics, self.name, time.perf_counter() - started, self._read_s)
        self.ticks += 1
        self.last = result
        return result

    def _read(self, now_s: float) -> Observation | NoData:
        started = time.perf_counter()
        try:
            return self.source.read(self.window_s, now_s)
        except Exception as exc:  # noqa: BLE001 - a source must return NoData; one that raises still must not stop us
            self.logger.warning("policy %s: metrics read raised %s: %s", self.name, type(exc).__name__, exc)
            return NoData(NoDataReason.UNREACHABLE, f"{type(exc).__name__}: {exc}", now_s)
        finally:
            self._read_s = time.perf_counter() - started

    def _tick(self, now_s: float) -> TickResult:
        leader = True
        if self.elector is not None:
            leader = self.elector.step(now_s)
        observation = self._read(now_s)
        self.monitor.observe(observation, now_s)
        try:
            decision = self.controller.tick(observation, now_s)
        except Exception as exc:  # noqa: BLE001 - a bug in one tick must not stop scaling for good
            record_error(self.metrics, self.name, "decide")
            record_observation(self.metrics, self.name, observation)
            self.logger.exception("policy %s: decide failed; holding", self.name)
            return TickResult(now_s, observation, leader=leader, error=f"decide: {exc}")
        if not leader:
            return TickResult(now_s, observation, decision, leader=False)
        record_decision(self.metrics, self.name, decision, getattr(self.controller, "last_forecast", None),
                        observation)
        targets = decision.targets()
        try:
            applied = self.actuator.apply(targets)
        except Exception as exc:  # noqa: BLE001 - ActuationError and anything else: count, log, retry next tick
            record_error(self.metrics, self.name, "actuate")
            self.logger.warning("policy %s: actuation failed (retrying next tick): %s", self.name, exc)
            return TickResult(now_s, observation, decision, leader=True, error=f"actuate: {exc}")
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

    # ------------------------------------------------------------------------------------------ schedule
    def run(self, stop: threading.Event | None = None, max_ticks: int | None = None,
            wait: Callable[[float], object] | None = None) -> int:
        """Tick on the grid until ``stop`` is set or ``max_ticks`` ran; returns the number of ticks."""
        stop = stop or threading.Event()
        wait = wait or self.clock.sleep  # `planner run` passes stop.wait so a signal ends the wait at once
        start_s = self.clock.now_s()
        k = 0
        ran = 0
        while not stop.is_set() and (max_ticks is None or ran < max_ticks):
            self.tick()
            ran += 1
            now_s = self.clock.now_s()
            # The next grid point strictly after now: a tick that overran skips the ones it missed.
            k = max(k + 1, int((now_s - start_s) // self.interval_s) + 1)
            if max_ticks is not None and ran >= max_ticks:
                break
            wait(max(0.0, start_s + k * self.interval_s - now_s))
        return ran
