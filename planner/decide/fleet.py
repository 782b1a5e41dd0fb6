"""The fleet stage: every policy's decision fitted into one GPU budget (``fleet.yaml``'s ``budget.max_gpus``).

Pure: no I/O, no clock. Each tick every policy of the fleet decides as it would alone (``decide()``, its own
``budget.max_gpus`` included); this stage then fits the sum into the fleet's budget:

1. Floors first, always: every pool keeps ``min_replicas`` (a fleet whose floors exceed its budget is refused
   when it is loaded), and a pool whose decision held for missing data keeps what it holds (missing data
   never takes GPUs away).
1b. Wakes next: a policy that sleeps (its pools at zero together) with traffic that nothing else serves (its
   first step priced as an unbounded queue: requests held at the router, or a load it was sized for) gets that
   first step, one replica per pool, before any priority level grows, highest priority first while they fit,
   once that traffic has waited ``budget.wake_after_s`` for its priority (``wake_clock``; fleet.py passes the
   policies whose wait is over as ``first``).
   Priorities decide who grows past the smallest size that serves a request, not who serves at all: behind
   higher priorities a sleeping model's held requests waited past the router's timeout (`planner bench fleet`:
   272 failed while the burst bound the budget), and a woken one was put back to zero while it had traffic.
   A higher-priority policy that lost GPUs to a wake carries ``fleet_wake``.
2. Priorities, highest first: a policy keeps its SLA-sized replicas (what its decision asked for) before any
   policy of lower priority gets a GPU above its floors.
3. Within a policy, GPUs go to the binding pool: a policy grows one *step* of its SLA frontier at a time,
   so its grant is always a balanced set of pools (prefill and decode scaled down together), never one pool
   filled while the other starves: extra prefill replicas buy no SLA while decode is the bottleneck. Each
   pool says, per replica count, the share of the tick's load that count carries within the SLA
   (``PoolAsk.carries``; decide/outlook.py derives it from the sizing model; unknown, in proportion to
   what the pool asked for). The policy's next step adds one replica to the pool(s) whose count runs out
   first as the load grows, i.e. the smallest ``carries`` (pools tied there step together: a policy at
   zero wakes every pool at once). A step that does not fit stops the policy there: no pool of it grows
   past what the others can carry.
4. Equal priorities share by the marginal SLA cost of a GPU: the next step goes to the policy that would
   suffer most without it, per GPU the step costs. The cost of withholding a step is the policy's
   *pressure* at its current grant, the worst of its pools' predicted latency over the SLA target at the
   tick's load (TTFT for prefill, ITL for decode, the worse of the two for aggregated; decide/outlook.py).
   Above 1 the policy misses its SLA; infinite, a queue grows without bound (two of those tie, whatever their
   steps cost: a policy woken from zero is not outbid by a neighbour growing one GPU at a time). Ties go to
   the policy furthest below the GPUs it asked for, as a share of them, then by name.
5. Scale-downs free capacity before scale-ups in the same tick: the fit is of this tick's targets, so GPUs a
   policy gives back are granted to another in the same tick, and ``FleetFit.order`` applies the policies
   that shrink before those that grow.

Every pool granted fewer replicas than it asked for carries a Reason: ``fleet_priority`` when its level's
asks would have fitted had the higher levels stayed at their floors (a higher-priority policy took the
GPUs), ``fleet_wake`` when they would have fitted but for lower-priority policies' wakes (rule 1b),
``fleet_share`` otherwise (its own level asks for more than there is).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
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
    ``floor + i + 1``), for i in 0 .. wanted - floor - 1. ``carries[i]``: the share of the tick's load that
    ``floor + i`` replicas carry within the SLA, for i in 0 .. wanted - floor (non-decreasing; () means in
    proportion to ``wanted``). ``current``: the replicas it runs now (None: unknown), to order the
    policies that shrink first.
    """

    wanted: int
    gpus_per_replica: int
    floor: int = 0
    sla_cost: tuple[float, ...] = ()
    current: int | None = None
    carries: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.wanted or self.gpus_per_replica < 1:
            raise ValueError(f"pool ask: need 0 <= floor {self.floor} <= wanted {self.wanted} and "
                             f"gpus_per_replica {self.gpus_per_replica} >= 1")
        if self.sla_cost and len(self.sla_cost) != self.wanted - self.floor:
            raise ValueError(f"pool ask: {len(self.sla_cost)} costs for {self.wanted - self.floor} replicas above "
                             "the floor")
        if self.carries and (len(self.carries) != self.wanted - self.floor + 1
                             or any(b < a for a, b in zip(self.carries, self.carries[1:], strict=False))):
            raise ValueError(f"pool ask: carries must be {self.wanted - self.floor + 1} non-decreasing shares "
                             f"(floor {self.floor} .. wanted {self.wanted}), got {self.carries}")

    def pressure(self, replicas: int) -> float:
        """The SLA cost of withholding the replica after ``replicas`` (1.0 if unpriced, 0 at ``wanted``)."""
        if replicas >= self.wanted:
            return 0.0
        value = self.sla_cost[replicas - self.floor] if self.sla_cost else 1.0
        return value if math.isfinite(value) else _INF_COST

    def carried(self, replicas: int) -> float:
        """The share of the tick's load ``replicas`` carry within the SLA (none at zero replicas)."""
        if replicas <= 0:
            return 0.0
        if self.carries:
            return self.carries[min(replicas, self.wanted) - self.floor]
        return replicas / self.wanted


@dataclass(frozen=True)
class PolicyAsk:
    name: str
    priority: int
    pools: Mapping[str, PoolAsk]
    together: bool = False  # its pools sleep and wake together (scale to zero): none of them woken alone

    @property
    def wanted_gpus(self) -> int:
        return sum(p.wanted * p.gpus_per_replica for p in self.pools.values())

    def next_step(self, granted: Mapping[str, int]) -> tuple[str, ...]:
        """The pools the policy's SLA frontier grows next from ``granted``: those whose count runs out first
        as the load grows (the smallest share carried; ties step together); () when every pool has all it
        asked for."""
        short = {p: a.carried(granted[p]) for p, a in self.pools.items() if granted[p] < a.wanted}
        if not short:
            return ()
        first = min(short.values())
        return tuple(sorted(p for p, x in short.items() if x <= first))

    def pressure(self, granted: Mapping[str, int]) -> float:
        """The policy's SLA cost at ``granted``: its worst pool's."""
        return max((a.pressure(granted[p]) for p, a in self.pools.items()), default=0.0)

    @property
    def wakes(self) -> bool:
        """It sleeps and wakes together, every pool's floor is zero, and its first step is priced as an unbounded
        queue: traffic that nothing else serves (requests held at the router, or a load it was sized for)."""
        return (self.together and bool(self.pools) and all(p.floor == 0 for p in self.pools.values())
                and self.pressure({p: 0 for p in self.pools}) >= _INF_COST)

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


def fit_fleet(asks: Sequence[PolicyAsk], max_gpus: int, first: Collection[str] | None = None) -> FleetFit:
    """Every ask within ``max_gpus`` (see the module's rules); unchanged where the sum fits. ``first``: the
    policies rule 1b may wake ahead of the priorities (None: every one; empty: none, strict priority)."""
    ask = {(a.name, pool): p for a in asks for pool, p in a.pools.items()}
    priority = {a.name: a.priority for a in asks}
    granted = {a.name: {pool: p.floor for pool, p in a.pools.items()} for a in asks}
    reasons: dict[str, dict[str, tuple[Reason, ...]]] = {}
    if sum(a.wanted_gpus for a in asks) <= max_gpus:
        granted = {a.name: {pool: p.wanted for pool, p in a.pools.items()} for a in asks}
    else:
        floors_gpus = sum(p.floor * p.gpus_per_replica for p in ask.values())
        woken = _wake([a for a in asks if first is None or a.name in first], granted, max_gpus - floors_gpus)
        left = max_gpus - floors_gpus - sum(woken.values())
        for level in sorted({a.priority for a in asks}, reverse=True):
            members = sorted((a for a in asks if a.priority == level), key=lambda a: a.name)
            need = sum((p.wanted - granted[a.name][pool]) * p.gpus_per_replica
                       for a in members for pool, p in a.pools.items())
            # Had the higher levels stayed at their floors, this level would have had ``free`` (its own wakes are
            # in its grant already), ``below`` of it taken by lower priorities' wakes.
            below = sum(g for n, g in woken.items() if priority[n] < level)
            free = max_gpus - floors_gpus - sum(g for n, g in woken.items() if priority[n] == level)
            left = _share(members, granted, left)
            for a in members:
                for pool, p in a.pools.items():
                    if granted[a.name][pool] < p.wanted:
                        why = (Reason.FLEET_PRIORITY if need <= free - below else
                               Reason.FLEET_WAKE if need <= free else Reason.FLEET_SHARE)
                        reasons.setdefault(a.name, {})[pool] = (why,)
    out = {a.name: dict(granted[a.name]) for a in asks}  # a decision may name no pool (nothing known)
    granted_gpus = {a.name: sum(out[a.name][p] * a.pools[p].gpus_per_replica for p in a.pools) for a in asks}
    return FleetFit(max_gpus, out, {a.name: a.wanted_gpus for a in asks}, granted_gpus, reasons,
                    _order(asks, granted_gpus))


def wake_clock(asks: Sequence[PolicyAsk], previous: Mapping[str, float], held: Collection[str],
               now_s: float) -> dict[str, float]:
    """Rule 1b's clock: since when each policy that wakes (``PolicyAsk.wakes``) has had traffic, counted from a
    tick where it was asleep (zero replicas, or none known). It runs on while the policy is awake with traffic
    (a woken policy is not put back to zero while it has traffic) and stops when the traffic does; a policy
    held this tick (a wake tick of another) keeps its clock."""
    out: dict[str, float] = {}
    for a in asks:
        if a.name in held:
            if a.name in previous:
                out[a.name] = previous[a.name]
        elif a.wakes and (a.name in previous or a.current_gpus in (0, None)):
            out[a.name] = previous.get(a.name, now_s)
    return out


def wake_first(asks: Sequence[PolicyAsk], since: Mapping[str, float], now_s: float,
               after_s: float | None) -> frozenset[str]:
    """The policies rule 1b wakes ahead of the priorities: those whose traffic has waited ``after_s`` (fleet.yaml
    ``budget.wake_after_s``; None: none, strict priority), and those already awake with traffic on the clock (a
    wake the priorities granted is not taken back while its replicas start: its held requests would wait for a
    second start)."""
    if after_s is None:
        return frozenset()
    return frozenset(a.name for a in asks if a.name in since
                     and (now_s - since[a.name] >= after_s or (a.current_gpus or 0) > 0))


def _wake(asks: Sequence[PolicyAsk], granted: dict[str, dict[str, int]], left: int) -> dict[str, int]:
    """Rule 1b: every sleeping policy with traffic nothing else serves gets its first step (every pool at one
    replica), highest priority first, then by name, while it fits in ``left``; returns the GPUs each woke with."""
    woken: dict[str, int] = {}
    for a in sorted(asks, key=lambda a: (-a.priority, a.name)):
        mine = granted[a.name]
        if not a.wakes:
            continue
        step = a.next_step(mine)
        gpus = sum(a.pools[p].gpus_per_replica for p in step)
        if set(step) != set(a.pools) or gpus > left:
            continue  # a policy is never woken half; one that does not fit waits for the priorities
        for pool in step:
            mine[pool] += 1
        woken[a.name], left = gpus, left - gpus
    return woken


def _share(members: Sequence[PolicyAsk], granted: dict[str, dict[str, int]], left: int) -> int:
    """Grant ``members`` (one priority level, in name order) one frontier step at a time by the marginal SLA
    cost of a GPU; returns the GPUs left. A policy whose next step does not fit grows no further."""
    open_ = list(members)
    while True:
        steps = {a.name: a.next_step(granted[a.name]) for a in open_}
        step_gpus = {a.name: sum(a.pools[p].gpus_per_replica for p in steps[a.name]) for a in open_}
        open_ = [a for a in open_ if steps[a.name] and step_gpus[a.name] <= left]
        if not open_:
            return left

        def rank(a: PolicyAsk, gpus: int) -> tuple[float, float]:
            mine = granted[a.name]
            wanted = a.wanted_gpus
            behind = (wanted - sum(n * a.pools[p].gpus_per_replica for p, n in mine.items())) / max(1, wanted)
            pressure = a.pressure(mine)
            # Two unbounded queues tie whatever their steps cost (divided, the cheaper step always won: a
            # policy woken from zero, whose first step is a whole prefill + decode pair, lost to a busy one
            # growing a replica at a time until its held requests timed out); the tie goes by share behind.
            return (pressure if pressure >= _INF_COST else pressure / gpus), behind

        pick = max(open_, key=lambda a: rank(a, step_gpus[a.name]))  # the first in name order among equals
        for pool in steps[pick.name]:
            granted[pick.name][pool] += 1
        left -= step_gpus[pick.name]


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
    next tick's behaviour rules (rate limits, scale events) start from what the pools were given; the
    direction audit (the flap guard's) keeps the direction ``decide`` chose."""
    for pool, wanted in decided.targets().items():
        gave = granted.pools[pool].replicas if pool in granted.pools else wanted
        if gave == wanted:
            continue
        memory = state.pool(pool)
        step = sum(d for t, d in memory.events if t == now_s)  # the change decide() committed this tick
        current = wanted - step
        undone = replace(memory, events=tuple(e for e in memory.events if e[0] != now_s),
                         direction_changes=tuple(t for t in memory.direction_changes if t != now_s))
        # The grant's step counts for the rate limits (events), but the direction audit keeps what decide()
        # committed: a clamp and its undo are the fleet's, not the pool's flaps. Audited, one clamp of a
        # priority-10 pool (decode 2 -> 1 for a wake, back to 2 next tick) made its later one-replica
        # scale-down a "flap" held for the audit's hour: 2 GPUs for 45 minutes (`planner bench fleet`).
        audit = commit(undone, current, wanted, now_s, rules)
        given = commit(undone, current, gave, now_s, rules)
        state = state.with_pool(pool, replace(given, direction_changes=audit.direction_changes,
                                              last_direction=audit.last_direction))
    return state


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
