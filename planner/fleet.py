"""The fleet as a controller: every policy's planner ticks, then the fleet stage fits them into one budget.

No clock, no I/O: the simulator (planner/sim/evaluate/fleet_replay.py), ``planner plan --fleet`` and the live
service (planner/service/fleet_loop.py) drive it alike through ``tick(observations, now_s)``. The stage itself
is decide/fleet.py; this module builds its asks from the policies' decisions (pricing replicas by
decide/outlook.py only when the budget binds), applies the grant to each decision, and makes each planner's
state remember what it was granted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.controller import PlannerController
from planner.decide.fleet import FleetFit, PolicyAsk, PoolAsk, fit_fleet, granted_decision, regranted_state
from planner.decide.outlook import Outlook, outlook
from planner.decide.state import PlannerState
from planner.fleet_file import Fleet
from planner.types import Decision, NoData, Observation, Pool, Reason


@dataclass(frozen=True)
class FleetTick:
    at_s: float
    wanted: Mapping[str, Decision]  # what each policy decided alone
    granted: Mapping[str, Decision]  # what the fleet gives it (the decisions to apply)
    fit: FleetFit

    def summary(self) -> dict:
        """The tick as /v1/fleet and the reports show it."""
        return {"at_s": self.at_s, "budget_gpus": self.fit.budget_gpus, "used_gpus": self.fit.used_gpus,
                "wanted_gpus": sum(self.fit.wanted_gpus.values()), "binds": self.fit.binds,
                "policies": {name: {"wanted_gpus": self.fit.wanted_gpus[name],
                                    "granted_gpus": self.fit.granted_gpus[name],
                                    "wanted": self.wanted[name].targets(), "granted": self.granted[name].targets(),
                                    "reason": (r.value if (r := self.fit.reason(name)) is not None else None)}
                             for name in self.fit.order}}


class FleetPlanner:
    """One PlannerController per member of ``fleet`` (by policy name), ticked together."""

    def __init__(self, fleet: Fleet, controllers: Mapping[str, PlannerController]) -> None:
        missing = [m.name for m in fleet.members if m.name not in controllers]
        if missing:
            raise ValueError(f"no controller for {', '.join(missing)}")
        self.fleet = fleet
        self.controllers = dict(controllers)
        self.priority = {m.name: m.priority for m in fleet.members}
        self.last: FleetTick | None = None

    def tick(self, observations: Mapping[str, Observation | NoData], now_s: float) -> FleetTick:
        before = {n: c.state for n, c in self.controllers.items()}
        wanted = {n: c.tick(observations[n], now_s) for n, c in self.controllers.items()}
        asks = [self._ask(n, wanted[n], before[n]) for n in self.controllers]
        if sum(a.wanted_gpus for a in asks) > self.fleet.max_gpus:
            looks = {n: outlook(c.spec, observations[n], c.last_forecast, before[n], now_s)
                     for n, c in self.controllers.items()}
            asks = [self._ask(n, wanted[n], before[n], looks[n]) for n in self.controllers]
        else:
            looks = {}
        fit = fit_fleet(asks, self.fleet.max_gpus)
        granted: dict[str, Decision] = {}
        for name in fit.order:
            decision, controller = wanted[name], self.controllers[name]
            if fit.granted[name] == decision.targets():
                granted[name] = decision
                continue
            look = looks.get(name)
            predicted = ({p: look.predicted(Pool(p), n) for p, n in fit.granted[name].items()}
                         if look is not None else None)
            granted[name] = granted_decision(decision, fit.granted[name], fit.reasons.get(name, {}), predicted)
            controller.state = regranted_state(controller.state, decision, granted[name], now_s,
                                               controller.policy.behavior)
        self.last = FleetTick(now_s, wanted, granted, fit)
        return self.last

    def _ask(self, name: str, decision: Decision, before: PlannerState, look: Outlook | None = None) -> PolicyAsk:
        policy = self.controllers[name].policy
        held = Reason.NO_DATA_HOLD in decision.reasons
        pools = {}
        for pool, pd in decision.pools.items():
            # A pool held for missing data keeps what it holds: missing data never takes GPUs away.
            floor = pd.replicas if held else min(pd.replicas, policy.pool(pool).min_replicas)
            costs = (tuple(look.pressure(Pool(pool), c) for c in range(floor, pd.replicas))
                     if look is not None else ())
            pools[pool] = PoolAsk(pd.replicas, pd.gpus_per_replica, floor, costs, before.pool(pool).target)
        return PolicyAsk(name, self.priority[name], pools)
