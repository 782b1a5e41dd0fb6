"""The fleet as a controller: every policy's planner ticks, then the fleet stage fits them into one budget.

No clock, no I/O: the simulator (planner/sim/evaluate/fleet_replay.py), ``planner plan --fleet`` and the live
service (planner/service/fleet_loop.py) drive it alike through ``tick(observations, now_s)``. The stage itself
is decide/fleet.py; this module builds its asks from the policies' decisions (pricing replicas by
decide/outlook.py only when the budget binds), applies the grant to each decision, and makes each planner's
state remember what it was granted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from planner.config import Policy
from planner.controller import PlannerController
from planner.decide.fleet import (
    FleetFit,
    PolicyAsk,
    PoolAsk,
    fit_fleet,
    granted_decision,
    regranted_state,
    wake_clock,
    wake_first,
)
from planner.decide.outlook import Outlook, outlook
from planner.decide.spec import DeciderSpec
from planner.decide.state import PlannerState
from planner.decide.whatif import plan, what_if_inputs, what_if_policy
from planner.fleet_file import Fleet, FleetBudget
from planner.types import Decision, NoData, Observation, Pool, Reason


@dataclass(frozen=True)
class FleetTick:
    at_s: float
    wanted: Mapping[str, Decision]  # what each policy decided alone
    granted: Mapping[str, Decision]  # what the fleet gives it (the decisions to apply)
    fit: FleetFit
    held: frozenset[str] = frozenset()  # policies that did not decide this tick: they keep what they have
    wake_since: Mapping[str, float] = field(default_factory=dict)  # rule 1b's clock (decide/fleet.py wake_clock)

    def applied(self) -> list[str]:
        """The policies whose grant is to be applied, in the stage's order (those giving GPUs back first)."""
        return [n for n in self.fit.order if n not in self.held]

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

    def __init__(self, fleet: Fleet, controllers: Mapping[str, PlannerController], max_gpus: int | None = None) -> None:
        """``max_gpus``: the budget to fit into (default the fleet's; the simulator's unshared comparison
        passes one that never binds)."""
        missing = [m.name for m in fleet.members if m.name not in controllers]
        if missing:
            raise ValueError(f"no controller for {', '.join(missing)}")
        self.fleet = fleet
        self.controllers = dict(controllers)
        self.priority = {m.name: m.priority for m in fleet.members}
        self.max_gpus = fleet.max_gpus if max_gpus is None else max_gpus
        self.last: FleetTick | None = None

    def tick(self, observations: Mapping[str, Observation | NoData], now_s: float,
             only: set[str] | frozenset[str] | None = None, draining_gpus: int = 0) -> FleetTick:
        """Every policy decides and the stage fits them; ``only``: a wake off the grid (the router holds a
        request for a policy at zero), where only those policies decide and the others keep the grant in force
        (their windows and rates are read on the grid; a wake must not move them). ``observations`` needs only
        the policies that decide. ``draining_gpus``: GPUs still held by replicas on their way out, not to be
        granted again until they are free (the simulator knows them; live, Kubernetes keeps a pod that cannot
        get its GPUs Pending)."""
        held = frozenset(self.controllers) - frozenset(only) if only is not None and self.last is not None \
            else frozenset()
        before = {n: c.state for n, c in self.controllers.items()}
        wanted = {n: (self.last.granted[n] if n in held and self.last is not None else c.tick(observations[n], now_s))
                  for n, c in self.controllers.items()}
        policies = {n: c.policy for n, c in self.controllers.items()}
        looks = lambda: {n: (outlook(c.spec, observations[n], c.last_forecast, before[n], now_s)  # noqa: E731
                             if n not in held else None) for n, c in self.controllers.items()}
        tick = fit_decisions(self.max_gpus - draining_gpus, policies, self.priority, wanted, before, looks, now_s,
                             held, self.fleet.budget, self.last.wake_since if self.last is not None else {})
        for name, decision in tick.granted.items():
            if decision is not wanted[name]:
                controller = self.controllers[name]
                controller.state = regranted_state(controller.state, wanted[name], decision, now_s,
                                                   controller.policy.behavior)
        self.last = tick
        return tick


def fit_decisions(max_gpus: int, policies: Mapping[str, Policy], priority: Mapping[str, int],
                  wanted: Mapping[str, Decision], before: Mapping[str, PlannerState],
                  looks: Callable[[], Mapping[str, Outlook | None]], now_s: float,
                  held: set[str] | frozenset[str] = frozenset(), budget: FleetBudget | None = None,
                  wake_since: Mapping[str, float] | None = None) -> FleetTick:
    """The fleet stage on one tick's decisions; ``looks`` is asked only when the budget binds; ``held``:
    policies that keep what they have this tick (nothing can be applied to them); ``budget``: fleet.yaml's, for
    its wake rule (None: wakes at once); ``wake_since``: the previous tick's rule 1b clock."""
    asks = [policy_ask(n, priority[n], policies[n], wanted[n], before[n], held=n in held) for n in wanted]
    outlooks: Mapping[str, Outlook | None] = {}
    if sum(a.wanted_gpus for a in asks) > max_gpus:
        outlooks = looks()
        asks = [policy_ask(n, priority[n], policies[n], wanted[n], before[n], outlooks[n], n in held) for n in wanted]
    since = wake_clock(asks, wake_since or {}, held, now_s)
    fit = fit_fleet(asks, max_gpus, wake_first(asks, since, now_s, 0.0 if budget is None else budget.wake_after))
    granted: dict[str, Decision] = {}
    for name in fit.order:
        decision = wanted[name]
        if fit.granted[name] == decision.targets():
            granted[name] = decision
            continue
        look = outlooks.get(name)
        predicted = ({p: look.predicted(Pool(p), n) for p, n in fit.granted[name].items()}
                     if look is not None else None)
        granted[name] = granted_decision(decision, fit.granted[name], fit.reasons.get(name, {}), predicted,
                                         policies[name].mode)
    return FleetTick(now_s, dict(wanted), granted, fit, frozenset(held), since)


def policy_ask(name: str, priority: int, policy: Policy, decision: Decision, before: PlannerState,
               look: Outlook | None = None, held: bool = False) -> PolicyAsk:
    """What ``decision`` asks of the fleet, each replica above the floor priced by ``look`` (None: unpriced);
    ``held``: it keeps what it has (as a decision held for missing data does)."""
    held = held or Reason.NO_DATA_HOLD in decision.reasons
    # A pool held for missing data keeps what it holds: missing data never takes GPUs away.
    floors = {pool: pd.replicas if held else min(pd.replicas, policy.pool(pool).min_replicas)
              for pool, pd in decision.pools.items()}
    # Its SLA frontier, where more than one pool can grow: what each size carries of the load.
    frontier = look is not None and sum(pd.replicas > floors[p] for p, pd in decision.pools.items()) > 1
    pools = {}
    for pool, pd in decision.pools.items():
        floor = floors[pool]
        costs = (tuple(look.pressure(Pool(pool), c) for c in range(floor, pd.replicas))
                 if look is not None else _unread_costs(policy, pd.reasons, floor, pd.replicas))
        carries = look.carries(Pool(pool), floor, pd.replicas) if frontier and look is not None else ()
        before_pool = before.pool(pool) if before is not None else None
        pools[pool] = PoolAsk(pd.replicas, pd.gpus_per_replica, floor, costs,
                              before_pool.target if before_pool is not None else None, carries)
    return PolicyAsk(name, priority, pools, together=policy.scales_to_zero())


def _unread_costs(policy: Policy, reasons: tuple[Reason, ...], floor: int, replicas: int) -> tuple[float, ...]:
    """The prices of a pool ``decide`` sized without an outlook (nothing measured). A policy that may sleep
    and asks for a first replica for traffic (woken for requests held at the router, or sized while its
    replicas start and show nothing yet) has its first replica priced as an unbounded queue: those requests are
    served by nothing else. The rest, and every other pool, unpriced. Unpriced, such a policy lost its first
    replica (or had it taken back while it started) to any policy of its priority over its SLA, and its held
    requests timed out at the router (`planner bench fleet --quick`: 611 failed)."""
    if not policy.scales_to_zero() or floor > 0 or replicas <= 0 or Reason.IDLE_WINDOW in reasons:
        return ()
    return (math.inf, *(1.0,) * (replicas - 1))


def plan_fleet(fleet: Fleet, loads: Mapping[str, tuple[float, float, float]]) -> FleetTick:
    """What-if for the fleet: each policy's ``planner plan`` at its load (rate_rps, isl, osl), fitted into the
    budget (no state, no history: see decide/whatif.py)."""
    wanted, looks, policies = {}, {}, {}
    for m in fleet.members:
        rate, isl, osl = loads[m.name]
        policies[m.name] = what_if_policy(m.policy)
        wanted[m.name] = plan(m.policy, m.profile, rate, isl, osl)
        spec = DeciderSpec.build(policies[m.name], m.profile, stale_after_s=math.inf)
        obs, forecast = what_if_inputs(policies[m.name], rate, isl, osl)
        looks[m.name] = outlook(spec, obs, forecast, None, 0.0)
    return fit_decisions(fleet.max_gpus, policies, {m.name: m.priority for m in fleet.members}, wanted,
                         {n: PlannerState() for n in wanted}, lambda: looks, 0.0, budget=fleet.budget,
                         wake_since=dict.fromkeys(wanted, -math.inf))  # a what-if's load has been there all along
