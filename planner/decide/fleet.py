"""The fleet stage: every policy's decision fitted into one GPU budget (``fleet.yaml``'s ``budget.max_gpus``).

Pure: no I/O, no clock. Each tick every policy of the fleet decides as it would alone (``decide()``, its own
``budget.max_gpus`` included); this stage then fits the sum into the fleet's budget:

1. Floors first, always: every pool keeps ``min_replicas`` (a fleet whose floors exceed its budget is refused
   when it is loaded), and a pool whose decision held for missing data keeps what it holds (missing data
   never takes GPUs away).
2. Priorities, highest first: a policy keeps its SLA-sized replicas (what its decision asked for) before any
   policy of lower priority gets a GPU above its floors.
3. Equal priorities share by the marginal SLA cost of a GPU: the next replica goes to the pool that would
   suffer most without it, per GPU it costs. The cost of withholding replica c+1 from a pool is its
   *pressure* at c replicas, the sizing model's predicted latency over the SLA target (TTFT for prefill,
   ITL for decode, the worse of the two for aggregated; decide/outlook.py) divided by the replica's GPUs.
   Above 1 the pool misses its SLA; infinite, its queue grows without bound. Ties (pools that all meet
   their SLA at c) go to the pool furthest below what it asked for, as a share of it, then by name
   (policy, then pool, in alphabetical order).
4. Scale-downs free capacity before scale-ups in the same tick: the fit is of this tick's targets, so GPUs a
   policy gives back are granted to another in the same tick, and ``FleetFit.order`` applies the policies
   that shrink before those that grow.

Every pool granted fewer replicas than it asked for carries a Reason: ``fleet_priority`` when its level's
asks would have fitted had the higher levels stayed at their floors (a higher-priority policy took the
GPUs), ``fleet_share`` otherwise (its own level asks for more than there is).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from planner.config import Behavior
from planner.decide.behavior import commit
from planner.decide.state import PlannerState
from planner.types import Decision, Mode, Reason

_INF_COST = 1e18  # an unbounded queue outranks any finite pressure; ties between two are broken by share


@dataclass(frozen=True)
class PoolAsk:
    """One pool's ask: ``wanted`` replicas of ``gpus_per_replica`` GPUs, never fewer than ``floor``.

    ``sla_cost[i]``: the pool's pressure at ``floor + i`` replicas (the SLA cost of withholding replica
    ``floor + i + 1``), for i in 0 .. wanted - floor - 1. ``current``: the replicas it runs now (None:
    unknown), to order the policies that shrink first.
    """

    wanted: int
    gpus_per_replica: int
    floor: int = 0
    sla_cost: tuple[float, ...] = ()
    current: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.wanted or self.gpus_per_replica < 1:
            raise ValueError(f"pool ask: need 0 <= floor {self.floor} <= wanted {self.wanted} and "
                             f"gpus_per_replica {self.gpus_per_replica} >= 1")
        if self.sla_cost and len(self.sla_cost) != self.wanted - self.floor:
            raise ValueError(f"pool ask: {len(self.sla_cost)} costs for {self.wanted - self.floor} replicas above "
                             "the floor")

    def cost(self, replicas: int) -> float:
        """The SLA cost per GPU of withholding the replica after ``replicas`` (1.0 per replica if unpriced)."""
        i = replicas - self.floor
        value = self.sla_cost[i] if self.sla_cost else 1.0
        value = value if math.isfinite(value) else _INF_COST
        return value / self.gpus_per_replica


@dataclass(frozen=True)
class PolicyAsk:
    name: str
    priority: int
    pools: Mapping[str, PoolAsk]
    together: bool = False  # its pools sleep and wake together (scale to zero): none of them woken alone

    @property
    def wanted_gpus(self) -> int:
        return sum(p.wanted * p.gpus_per_replica for p in self.pools.values())

    @property
    def current_gpus(self) -> int | None:
        if any(p.current is None for p in self.pools.values()):
            return None
        return sum((p.current or 0) * p.gpus_per_replica for p in self.pools.values())


@dataclass(frozen=True)
class FleetFit:
    """The replicas granted per policy and pool, why each clamped pool lost GPUs, and the order to apply."""

    budget_gpus: int
    granted: Mapping[str, Mapping[str, int]]
    wanted_gpus: Mapping[str, int]
    granted_gpus: Mapping[str, int]
    reasons: Mapping[str, Mapping[str, tuple[Reason, ...]]] = field(default_factory=dict)  # clamped pools only
    order: tuple[str, ...] = ()  # apply in this order: the policies that shrink, then the rest

    @property
    def used_gpus(self) -> int:
        return sum(self.granted_gpus.values())

    @property
    def binds(self) -> bool:
        return sum(self.wanted_gpus.values()) > self.budget_gpus

    def reason(self, policy: str) -> Reason | None:
        """The fleet's reason for ``policy`` (None: it got all it asked for)."""
        found = [r for rs in self.reasons.get(policy, {}).values() for r in rs]
        return Reason.FLEET_PRIORITY if Reason.FLEET_PRIORITY in found else (found[0] if found else None)


def fit_fleet(asks: Sequence[PolicyAsk], max_gpus: int) -> FleetFit:
    """Every ask within ``max_gpus`` (see the module's rules); unchanged where the sum fits."""
    keys = [(a.name, pool) for a in asks for pool in a.pools]
    ask = {(a.name, pool): p for a in asks for pool, p in a.pools.items()}
    priority = {a.name: a.priority for a in asks}
    groups = {a.name: [(a.name, p) for p in a.pools] for a in asks if a.together}
    granted = {k: ask[k].floor for k in keys}
    reasons: dict[str, dict[str, tuple[Reason, ...]]] = {}
    if sum(a.wanted_gpus for a in asks) <= max_gpus:
        granted = {k: ask[k].wanted for k in keys}
    else:
        floors_gpus = sum(p.floor * p.gpus_per_replica for p in ask.values())
        left = max_gpus - floors_gpus
        for level in sorted({a.priority for a in asks}, reverse=True):
            members = [k for k in keys if priority[k[0]] == level]
            need = sum((ask[k].wanted - ask[k].floor) * ask[k].gpus_per_replica for k in members)
            lost_to_higher = need <= max_gpus - floors_gpus
            left = _share(members, ask, granted, left, groups)
            for name, pool in members:
                if granted[(name, pool)] < ask[(name, pool)].wanted:
                    why = Reason.FLEET_PRIORITY if lost_to_higher else Reason.FLEET_SHARE
                    reasons.setdefault(name, {})[pool] = (why,)
    out: dict[str, dict[str, int]] = {a.name: {} for a in asks}  # a decision may name no pool (nothing known)
    for name, pool in keys:
        out[name][pool] = granted[(name, pool)]
    granted_gpus = {a.name: sum(out[a.name][p] * a.pools[p].gpus_per_replica for p in a.pools) for a in asks}
    return FleetFit(max_gpus, out, {a.name: a.wanted_gpus for a in asks}, granted_gpus, reasons,
                    _order(asks, granted_gpus))


def _share(members: list[tuple[str, str]], ask: Mapping[tuple[str, str], PoolAsk],
           granted: dict[tuple[str, str], int], left: int, groups: Mapping[str, list[tuple[str, str]]]) -> int:
    """Grant ``members`` (one priority level) replicas one at a time by the marginal SLA cost of a GPU;
    returns the GPUs left. A sleeping policy whose pools wake together gets one replica of each at once."""
    def waking(k: tuple[str, str]) -> list[tuple[str, str]]:
        group = groups.get(k[0], [])
        return [g for g in group if ask[g].wanted > 0] if group and all(granted[g] == 0 for g in group) else [k]

    while True:
        open_ = sorted(k for k in members if granted[k] < ask[k].wanted
                       and sum(ask[g].gpus_per_replica for g in waking(k)) <= left)
        if not open_:
            return left

        def rank(k: tuple[str, str]) -> tuple[float, float]:
            a = ask[k]
            return (a.cost(granted[k]), (a.wanted - granted[k]) / max(1, a.wanted))

        pick = max(open_, key=rank)  # the first in name order among equals
        for k in waking(pick):
            granted[k] += 1
            left -= ask[k].gpus_per_replica


def _order(asks: Sequence[PolicyAsk], granted_gpus: Mapping[str, int]) -> tuple[str, ...]:
    """Policies that give GPUs back first (their capacity is what the others grow into), then the rest; each
    group by name."""
    def shrinks(a: PolicyAsk) -> bool:
        current = a.current_gpus
        return current is not None and granted_gpus[a.name] < current

    return tuple(a.name for a in sorted(asks, key=lambda a: (not shrinks(a), a.name)))


# ---------------------------------------------------------------------------------- applying a grant
def granted_decision(decision: Decision, granted: Mapping[str, int],
                     reasons: Mapping[str, tuple[Reason, ...]],
                     predicted: Mapping[str, tuple[float | None, float | None]] | None = None,
                     mode: Mode | None = None) -> Decision:
    """``decision`` with its pools at the granted replicas, each clamp's reason added (pool and decision), and
    the predicted latency at the granted sizes where ``predicted`` has it (the decision's own end-to-end
    prediction too, from its ``mode``'s TTFT and ITL pools)."""
    pools = dict(decision.pools)
    for pool, n in granted.items():
        pd = pools.get(pool)
        if pd is None or (n == pd.replicas and not reasons.get(pool)):
            continue
        ttft, itl = (predicted or {}).get(pool, (pd.predicted_ttft_ms, pd.predicted_itl_ms))
        extra = tuple(r for r in reasons.get(pool, ()) if r not in pd.reasons)
        pools[pool] = replace(pd, replicas=n, reasons=(*pd.reasons, *extra),
                              predicted_ttft_ms=_finite(ttft), predicted_itl_ms=_finite(itl))
    added = tuple(dict.fromkeys(r for rs in reasons.values() for r in rs if r not in decision.reasons))
    out = replace(decision, pools=pools, reasons=(*decision.reasons, *added))
    if mode is not None and predicted:
        ttft_pool, itl_pool = pools.get(mode.ttft_pool), pools.get(mode.itl_pool)
        out = replace(out, predicted_ttft_ms=ttft_pool.predicted_ttft_ms if ttft_pool is not None else None,
                      predicted_itl_ms=itl_pool.predicted_itl_ms if itl_pool is not None else None)
    return out


def regranted_state(state: PlannerState, decided: Decision, granted: Decision, now_s: float,
                    rules: Behavior) -> PlannerState:
    """The decision state remembering the granted replicas instead of the ones ``decide`` committed: the
    next tick's behaviour rules (rate limits, scale events) start from what the pools were given."""
    for pool, wanted in decided.targets().items():
        gave = granted.pools[pool].replicas if pool in granted.pools else wanted
        if gave == wanted:
            continue
        memory = state.pool(pool)
        step = sum(d for t, d in memory.events if t == now_s)  # the change decide() committed this tick
        current = wanted - step
        undone = replace(memory, events=tuple(e for e in memory.events if e[0] != now_s),
                         direction_changes=tuple(t for t in memory.direction_changes if t != now_s))
        state = state.with_pool(pool, commit(undone, current, gave, now_s, rules))
    return state


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
