"""`planner run --fleet`: every policy's control loop, ticked together, with the fleet stage between deciding
and applying.

One tick, on one grid (a fleet has one ``interval_s``): each loop leads, reads, seeds and decides
(``ControlLoop.decide_step``); the fleet stage (planner/fleet.py ``fit_decisions`` over decide/fleet.py, the
same as ``planner backtest --fleet`` and ``planner plan --fleet``) fits the decisions into the budget; each
planner's state is told what it was granted; then the loops apply their grants, the policies that give GPUs
back first (``ControlLoop.act_step``). GPUs still held by replicas draining through the router (the process
actuator's ``draining_replicas``) are not granted again until they are free, as in the simulator; Kubernetes
keeps a pod that cannot get its GPUs Pending, so the other actuators count none. A loop with nothing to
apply this tick (standby, held for seeding, its decision failed) keeps the GPUs of the decision in force: the fleet fits the others around it, as it does a
policy held for missing data.

Exports per policy its GPUs wanted vs granted and the reason it got less, and the fleet's GPUs wanted,
granted and in use against the budget (telemetry.record_fleet); ``GET /v1/fleet`` shows the last tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from planner.decide.fleet import regranted_state
from planner.decide.outlook import Outlook, outlook
from planner.fleet import FleetTick, fit_decisions
from planner.fleet_file import Fleet
from planner.service.loop import ControlLoop, Decided, TickResult, run_on_grid
from planner.service.wake import WakeSignal
from planner.telemetry import record_fleet
from planner.types import Decision, Observation, Reason

log = logging.getLogger("planner.fleet")


class FleetLoop:
    def __init__(self, fleet: Fleet, loops: Sequence[ControlLoop]) -> None:
        self.fleet = fleet
        self.loops = {loop.name: loop for loop in loops}
        self.priority = {m.name: m.priority for m in fleet.members}
        self.interval_s = fleet.interval_s
        self.clock = loops[0].clock
        self.metrics = loops[0].metrics
        self.last: FleetTick | None = None
        self.in_use_gpus: float | None = None
        self.ticks = 0
        self.wake_signal = WakeSignal()  # its event: a member policy woken by the router ticks the fleet now
        self.metrics.fleet_budget_gpus.set(fleet.max_gpus)

    def tick(self, only: set[str] | None = None) -> list[TickResult]:
        """Every policy decides, the stage fits, each applies its grant; ``only``: those policies decide (a
        wake), the others keep the decision in force, fitted around (their results are not in the list)."""
        started = time.perf_counter()
        now_s = self.clock.now_s()
        ticking = {n: loop for n, loop in self.loops.items() if only is None or n in only}
        before = {n: loop.controller.state for n, loop in self.loops.items()}
        steps: dict[str, TickResult | Decided] = {
            n: loop.guarded(now_s, partial(loop.decide_step, now_s)) for n, loop in ticking.items()}
        wanted, fixed = self._asks(steps)
        tick = None
        if wanted:
            policies = {n: self.loops[n].policy for n in wanted}
            tick = fit_decisions(self.fleet.max_gpus - self.draining_gpus(), policies, self.priority, wanted,
                                 before, lambda: self._outlooks(steps, before, now_s), now_s, held=fixed,
                                 budget=self.fleet.budget,
                                 wake_since=self.last.wake_since if self.last is not None else {})
            self._export(tick, steps)
            self.last = tick
        results: dict[str, TickResult] = {}
        for name in (tick.fit.order if tick is not None else ()):
            step = steps.get(name)
            if isinstance(step, Decided):
                assert tick is not None
                results[name] = self._act(self.loops[name], step, tick.granted[name], now_s)
        for name, step in steps.items():
            if isinstance(step, TickResult):
                results[name] = step
        self.ticks += 1
        return [self.loops[n].finish(results[n], started) for n in ticking]

    def draining_gpus(self) -> int:
        """GPUs held by replicas on their way out, over every policy whose actuator can tell (a pool's GPUs
        per replica from the decision in force; none in force: nothing of it was started by this loop)."""
        total = 0
        for loop in self.loops.values():
            draining = getattr(loop.actuator, "draining_replicas", None)
            if draining is None or loop.in_force is None:
                continue
            pools = loop.in_force.pools
            total += sum(n * pools[p].gpus_per_replica for p, n in draining().items() if p in pools)
        return total

    def wake_tick(self) -> list[TickResult]:
        """A tick off the grid for the router's wake: only the policies with requests held at the router decide
        (the others' windows and rates are read on the grid; a wake must not move them)."""
        woken = {n for n, loop in self.loops.items() if loop.wake_signal.pending() and loop.asleep()}
        return self.tick(woken) if woken else []

    def _act(self, loop: ControlLoop, step: Decided, granted: Decision, now_s: float) -> TickResult:
        """Tell the planner what it was granted, then apply the grant."""
        if granted is not step.decision:
            controller = loop.controller
            controller.state = regranted_state(controller.state, step.decision, granted, now_s, loop.policy.behavior)
        out = loop.guarded(now_s, partial(loop.act_step, Decided(step.observation, granted), now_s))
        assert isinstance(out, TickResult)
        return out

    def _asks(self, steps: Mapping[str, TickResult | Decided]) -> tuple[dict[str, Decision], set[str]]:
        """Each policy's decision to fit, and those that keep what they have (nothing applied this tick, or
        not ticked)."""
        wanted: dict[str, Decision] = {}
        fixed: set[str] = set()
        for name in self.loops:
            step = steps.get(name)
            if isinstance(step, Decided):
                wanted[name] = step.decision
            elif self.loops[name].in_force is not None:
                wanted[name] = self.loops[name].in_force  # type: ignore[assignment]
                fixed.add(name)
        return wanted, fixed

    def _outlooks(self, steps: Mapping[str, TickResult | Decided], before: Mapping, now_s: float
                  ) -> dict[str, Outlook | None]:
        out: dict[str, Outlook | None] = {}
        for name in self.loops:
            step = steps.get(name)
            controller = self.loops[name].controller
            spec = getattr(controller, "spec", None)
            obs = step.observation if isinstance(step, Decided) else None
            out[name] = (outlook(spec, obs, controller.last_forecast, before[name], now_s)
                         if spec is not None and obs is not None else None)
        return out

    def _export(self, tick: FleetTick, steps: Mapping[str, TickResult | Decided]) -> None:
        if len(steps) == len(self.loops):  # a wake's tick reads only the policies it wakes: in use stays
            self._in_use(tick, steps)
        reasons: dict[str, Reason | None] = {n: tick.fit.reason(n) for n in tick.wanted}
        record_fleet(self.metrics, self.fleet.max_gpus, dict(tick.fit.wanted_gpus), dict(tick.fit.granted_gpus),
                     reasons, self.in_use_gpus)
        if tick.fit.binds:
            log.info("fleet: %d GPUs wanted, %d granted of %d; %s", sum(tick.fit.wanted_gpus.values()),
                     tick.fit.used_gpus, self.fleet.max_gpus,
                     ", ".join(f"{n} {tick.fit.granted_gpus[n]}/{tick.fit.wanted_gpus[n]} ({r.value})"
                               for n, r in reasons.items() if r is not None) or "none clamped")

    def _in_use(self, tick: FleetTick, steps: Mapping[str, TickResult | Decided]) -> None:
        """The GPUs of the ready replicas every policy's read showed (None: a read had no data)."""
        in_use = 0.0
        for name, step in steps.items():
            obs = step.observation
            if not isinstance(obs, Observation):
                in_use = float("nan")
                continue
            pools = tick.wanted[name].pools if name in tick.wanted else {}
            in_use += sum((o.ready_replicas or 0) * pools[p].gpus_per_replica
                          for p, o in obs.pools.items() if p in pools)
        self.in_use_gpus = in_use if in_use == in_use else None

    def summary(self) -> dict:
        """What GET /v1/fleet answers."""
        base = {"budget_gpus": self.fleet.max_gpus, "interval_s": self.interval_s, "in_use_gpus": self.in_use_gpus,
                "priorities": dict(self.priority)}
        if self.last is None:
            return {**base, "at_s": None, "used_gpus": None, "wanted_gpus": None, "binds": None, "policies": {}}
        return {**base, **self.last.summary()}

    def run(self, stop: threading.Event | None = None, max_ticks: int | None = None,
            wait: Callable[[float], object] | None = None) -> int:
        """Tick on the fleet's grid until ``stop`` is set or ``max_ticks`` ran (as ControlLoop.run)."""
        return run_on_grid(self.tick, self.clock, self.interval_s, stop, max_ticks, wait, self.wake_tick)


