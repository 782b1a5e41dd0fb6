"""Behaviour in HPA's vocabulary: tolerance, stabilisation windows, rate policies, floors and ceilings.

Follows kube-controller-manager's ``normalizeDesiredReplicasWithBehaviors`` so operators get what the
field names promise: the scale-up recommendation is the *minimum* of the recommendations in the scale-up
window (a spike must persist to be acted on), the scale-down one the *maximum* in the scale-down window
(a dip must persist); then the rate policies cap the change against the replicas the pool had at the start
of each policy's period; then floors and ceilings. Time is an argument, never read from a clock.

Two points where a live loop differs from HPA's exact arithmetic:
- the period's start counts both directions' events, as HPA's ``periodStartReplicas = current - added +
  removed`` does (a pool that went up 2 and down 1 within the period started 1 below where it is);
- windows and periods end on a tolerance of the tick's jitter (``JITTER_SHARE`` of the interval): a live
  tick lands a few hundred ms either side of its grid point, so an event exactly one period old is sometimes
  19.9 s and sometimes 20.1 s old, and comparing exactly held a step or a release for one whole extra tick at
  random (20 s steps came 25 s apart at a 5 s interval). The simulator's exact clock always lands on the
  boundary; with the tolerance a live run releases on the same tick the backtest does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from planner.config import Behavior, Policy, PoolSpec, ScalingRules
from planner.decide.state import PlannerState, PoolMemory
from planner.types import Observation, Pool, PoolObservation, Reason

OSCILLATION_AUDIT_S = 3600.0  # how long direction changes are remembered
# The flap guard reads this many of the caller's intervals back, at most the hour: an hour at the usual 30 s
# interval, 2 minutes for `planner up`'s 1 s loop (whose 150 s demo an hour's audit outlasted: one reversal
# held decode a replica above its floor for the rest of the run).
AUDIT_INTERVALS = 120
# A scale-down that would reverse a scale-up, when the pool already reversed within the audit hour, must be
# a real change (at least this share of the pool, and at least 2 replicas) and not a flap of one replica
# around a steady load. Scale-ups are never held back: they protect the SLA.
FLAP_SHARE = 0.2
FLAP_MIN_REPLICAS = 2
# ...except on a decode pool of two whose size its ITL target sets, once no tick has asked for the second replica
# for HALF_AFTER_S: one replica is half its GPUs there, and a decode replica short raises the ITL while a prefill
# replica short queues prompts. Where its KV memory set the size within KV_BOUND_MEMORY_S (reason kv_bound), a
# replica short queues requests for memory as prefill queues prompts, and the guard holds as for any pool.
# Measured (five seeds of the suite, 48 held-out ServeGen hours; docs/benchmark-studies.md, "The flap guard
# on a decode pool of two"): held for every pool, a chat-docs seed fell from 97.0 to 88.3 % on a decode pool
# KV-bound on some ticks; given back at once (no quiet time), decode flapped 1 <-> 2 every minute and one ServeGen hour met a
# +25 % step on one replica (98.6 -> 94.8 %); 240 s did the same, 480 s held it (98.6 %).
KV_BOUND_MEMORY_S = 3600.0
HALF_AFTER_S = 480.0
# ...and on a prefill pool under the steady rules (behavior.steady) any step is a real change once the pool has
# settled: no tick asked for more than where it is heading for SETTLED_AFTER_S. One tick's ask had held a replica
# for the rest of the hour on steady traffic (held-out ServeGen hour 36: 5 prefill replicas for 40 minutes where
# every tick but one asked 4). Under the hedge the guard holds as before: there a wave shorter than its window
# keeps asking one replica more every few minutes (tests/test_decide_scenarios.py's square wave: 5 direction
# changes an hour instead of 2). Decode keeps its rules above: one ServeGen hour lost 2.7 points when a decode
# pool of two was released this early. The rate must also have read steady at every tick of the settling time:
# Azure code's rate read steady for two ticks between bursts (cv 0.29 against 0.3) and the step met the next burst a
# replica short (the fleet's code-large, seed 0: 95.89 -> 94.86 %). Measured: docs/benchmark-studies.md,
# "The flap guard on a settled prefill pool".
SETTLED_AFTER_S = 300.0
# ...and a KV-bound decode pool, with behavior.kv_settled_s set, once no tick asked for more for that long and the KV
# in use at the audit's peak would have fit this share of one replica fewer: a pool whose recommendation flips around
# its KV limit from noise (requests arriving in clumps) is released, one whose KV filled in bursts (chat-docs'
# documents) is not. Measured: docs/benchmark-studies.md, "Clumped arrivals and long prompts".
KV_SETTLED_SHARE = 0.8
# A window or period counts as over when at most this share of a tick remains: enough for the jitter of a
# live tick (its start lands late by up to a few hundred ms), too little to release a whole tick early.
JITTER_SHARE = 0.25


@dataclass(frozen=True)
class Behaved:
    replicas: int
    reasons: tuple[Reason, ...]
    memory: PoolMemory  # with this tick's recommendation recorded


def _downs(rules: Behavior) -> tuple[ScalingRules, ...]:
    """Every scale-down rule set the behaviour may use: memory is kept for the longest, so that switching
    from the steady rules back to the hedge finds the hedge's window and events in place."""
    return (rules.scale_down,) if rules.steady is None else (rules.scale_down, rules.steady.scale_down)


def _window(rules: Behavior) -> float:
    return float(max(rules.scale_up.stabilization_window_s, *(d.stabilization_window_s for d in _downs(rules))))


def _period(rules: Behavior) -> float:
    periods = [p.period_s for p in (*rules.scale_up.policies, *(q for d in _downs(rules) for q in d.policies))]
    return float(max(periods, default=0))


def period_start(current: int, events: tuple[tuple[float, int], ...], since_s: float) -> int:
    """HPA's ``periodStartReplicas``: where the pool was at ``since_s``, undoing the scale-ups *and*
    scale-downs recorded after it (``current - added + removed``)."""
    return current - sum(d for t, d in events if t > since_s)


def _up_limit(rules: ScalingRules, current: int, events: tuple[tuple[float, int], ...], now_s: float,
              tolerance_s: float = 0.0) -> int:
    if rules.select_policy == "disabled":
        return current
    limits = []
    for pol in rules.policies:
        start = period_start(current, events, now_s - pol.period_s + tolerance_s)
        if pol.type == "pods":
            limits.append(start + pol.value)
        else:
            # From zero replicas a percentage allows nothing; allow the first replica.
            limits.append(max(start + 1, math.ceil(start * (1 + pol.value / 100.0))))
    if not limits:
        return 10**9
    return max(limits) if rules.select_policy == "max" else min(limits)


def _down_limit(rules: ScalingRules, current: int, events: tuple[tuple[float, int], ...], now_s: float,
                tolerance_s: float = 0.0) -> int:
    if rules.select_policy == "disabled":
        return current
    limits = []
    for pol in rules.policies:
        start = period_start(current, events, now_s - pol.period_s + tolerance_s)
        if pol.type == "pods":
            limits.append(start - pol.value)
        else:
            limits.append(math.floor(start * (1 - pol.value / 100.0)))
    if not limits:
        return 0
    # "max" selects the policy allowing the biggest change, which for scale-down is the lowest limit.
    return min(limits) if rules.select_policy == "max" else max(limits)


def _rate_limited(out: int, current: int, memory: PoolMemory, now_s: float, rules: Behavior,
                  reasons: list[Reason], tolerance_s: float = 0.0) -> int:
    """The scale-up/scale-down policies' cap on the change this tick (appends the reason when it binds)."""
    if out > current:
        limit = _up_limit(rules.scale_up, current, memory.events, now_s, tolerance_s)
        if out > limit:
            reasons.append(Reason.SCALE_UP_LIMIT)
            return max(current, limit)
    elif out < current:
        limit = _down_limit(rules.scale_down, current, memory.events, now_s, tolerance_s)
        if out < limit:
            reasons.append(Reason.SCALE_DOWN_LIMIT)
            return min(current, limit)
    return out


def _a_flap(current: int, stabilised: int, memory: PoolMemory, history: tuple[tuple[float, int], ...],
            now_s: float, tick_s: float, half_is_real_after_s: float | None,
            settled_after_s: float | None = None) -> bool:
    """The flap guard: a scale-down to ``stabilised`` reverses a scale-up while the pool already reversed within
    the audit, and is not a real change. Judged on where the pool is heading (the stabilised recommendation),
    not on this tick's rate-limited step: a large pool shrinking 10 % a minute is a real change, not a flap.
    Half the pool is a real change once no tick asked for more for ``half_is_real_after_s``, any step once none
    did for ``settled_after_s`` (None: never)."""
    if memory.last_direction <= 0:
        return False
    audit_s = _audit_s(tick_s)
    if not any(t > now_s - audit_s for t in memory.direction_changes):
        return False
    step = current - stabilised
    if step >= max(FLAP_MIN_REPLICAS, FLAP_SHARE * current):
        return False

    def quiet(for_s: float | None) -> bool:
        return for_s is not None and all(r <= stabilised for t, r in history if t > now_s - for_s)

    return not (quiet(settled_after_s) or (quiet(half_is_real_after_s) and 2 * step >= current))


def behave(desired: int, current: int, memory: PoolMemory, now_s: float, rules: Behavior, spec: PoolSpec,
           allow_down: bool = True, flap_guard: bool = True, keep_s: float = 0.0, tick_s: float = 0.0,
           half_is_real_after_s: float | None = None, settled_after_s: float | None = None,
           hold_reason: Reason = Reason.NO_DATA_HOLD) -> Behaved:
    """The replicas to ask for this tick, the reason for every clamp, and the memory to carry forward.

    ``flap_guard`` adds the planner's one rule beyond HPA's (a scale-down that reverses a recent reversal must
    be a real change); the reactive baseline, which is HPA, runs without it. Recommendations are remembered
    for the longer of ``rules``' windows and ``keep_s``. ``tick_s``: the interval the caller ticks on; a
    window or period with less than ``JITTER_SHARE`` of it left counts as over (0: exact comparisons).
    ``half_is_real_after_s``: for the flap guard, half the pool is a real change too once no tick asked for more
    for this long (a decode pool its ITL sizes; None: never); ``settled_after_s``: any step is, once none did for
    this long (a prefill pool under the steady rules; None: never). ``allow_down`` False keeps at least the
    current size, for ``hold_reason``.
    """
    tolerance_s = JITTER_SHARE * max(0.0, tick_s)
    reasons: list[Reason] = []
    rec = desired
    if current > 0 and rec != current and abs(rec / current - 1.0) <= rules.tolerance:
        rec = current
        reasons.append(Reason.WITHIN_TOLERANCE)

    keep_after = now_s - max(_window(rules), keep_s)
    history = tuple((t, r) for t, r in memory.recommendations if t > keep_after)
    up_cut = now_s - rules.scale_up.stabilization_window_s + tolerance_s
    down_cut = now_s - rules.scale_down.stabilization_window_s + tolerance_s
    up_rec = min([rec, *(r for t, r in history if t > up_cut)])
    down_rec = max([rec, *(r for t, r in history if t > down_cut)])
    stabilised = current
    if stabilised < up_rec:
        stabilised = up_rec
    if stabilised > down_rec:
        stabilised = down_rec
    if rec > current and stabilised < rec:
        reasons.append(Reason.SCALE_UP_STABILIZED)
    if rec < current and stabilised > rec:
        reasons.append(Reason.SCALE_DOWN_STABILIZED)

    out = _rate_limited(stabilised, current, memory, now_s, rules, reasons, tolerance_s)

    if flap_guard and out < current and _a_flap(current, stabilised, memory, history, now_s, tick_s,
                                                half_is_real_after_s, settled_after_s):
        out = current
        reasons.append(Reason.SCALE_DOWN_STABILIZED)

    if not allow_down and out < current:
        out = current
        reasons.append(hold_reason)
    if out < spec.min_replicas:
        out = spec.min_replicas
        reasons.append(Reason.FLOOR)
    if out > spec.max_replicas:
        out = spec.max_replicas
        reasons.append(Reason.CEILING)
    # HPA keeps the raw recommendation (before rate limits) so the windows see the true demand.
    memory = replace(memory, recommendations=(*history, (now_s, rec)))
    return Behaved(out, tuple(reasons), memory)


def commit(memory: PoolMemory, current: int, final: int, now_s: float, rules: Behavior) -> PoolMemory:
    """Record the replicas finally decided (after the budget): a scale event and the direction audit."""
    keep_events = now_s - _period(rules)
    events = tuple((t, d) for t, d in memory.events if t > keep_events)
    changes = tuple(t for t in memory.direction_changes if t > now_s - OSCILLATION_AUDIT_S)
    direction = memory.last_direction
    if final != current:
        events = (*events, (now_s, final - current))
        step = 1 if final > current else -1
        if direction and step != direction:
            changes = (*changes, now_s)
        direction = step
    return replace(memory, target=final, events=events, direction_changes=changes, last_direction=direction)


# ----------------------------------------------------------------------------------- stage 4 of decide()
@dataclass(frozen=True)
class Recommended:
    """One pool after the behaviour rules: where it is, what it may go to, why, and the memory to carry."""

    current: int
    replicas: int
    memory: PoolMemory
    reasons: tuple[Reason, ...]


def current_replicas(spec: PoolSpec, memory: PoolMemory, ready: int | None) -> int:
    """The replicas the pool is at: our last target, unless someone scaled it up behind our back.

    Ready replicas below our target are replicas still starting, so they do not lower ``current``; ready
    replicas above it can only come from an external change, which we adopt so that any way back down goes
    through the scale-down behaviour instead of a sudden drop.
    """
    if memory.target is None:
        return int(ready) if ready is not None else spec.min_replicas
    if ready is not None and ready > memory.target:
        return int(ready)
    return memory.target


def recovery_rules(policy: Policy, rules: Behavior) -> Behavior:
    """The rules while the error budget recovers (reason ``budget_overspent``): the hedge's, with its scale-down
    waiting ``sla.recover_hold_s`` (never less than its own window). Recovery comes on bursty load, whose misses
    come where a burst follows a lull: capacity given back in the lull is two minutes from serving the next burst."""
    down = rules.scale_down
    if policy.sla.recover_hold_s <= down.stabilization_window_s:
        return rules
    return rules.model_copy(update={"scale_down": down.model_copy(
        update={"stabilization_window_s": policy.sla.recover_hold_s})})


def _sized_by_itl(pool: Pool, memory: PoolMemory, now_s: float) -> bool:
    """A decode pool whose size its KV memory did not set within ``KV_BOUND_MEMORY_S``."""
    kv_bound_lately = memory.kv_bound_at_s is not None and now_s - memory.kv_bound_at_s <= KV_BOUND_MEMORY_S
    return pool == Pool.DECODE and not kv_bound_lately


def _audit_s(tick_s: float) -> float:
    return min(OSCILLATION_AUDIT_S, AUDIT_INTERVALS * tick_s) if tick_s > 0 else OSCILLATION_AUDIT_S


def _with_kv_in_use(memory: PoolMemory, po: PoolObservation | None, now_s: float, tick_s: float) -> PoolMemory:
    """``memory`` with this tick's KV in use (usage x ready replicas) added, kept over the flap guard's audit."""
    kept = tuple((t, u) for t, u in memory.kv_in_use if t > now_s - _audit_s(tick_s))
    if po is not None and po.kv_usage is not None and po.ready_replicas:
        kept += ((now_s, po.kv_usage * po.ready_replicas),)
    return replace(memory, kv_in_use=kept)


def _kv_settled_s(policy: Policy, pool: Pool, memory: PoolMemory, now_s: float, current: int) -> float | None:
    """behavior.kv_settled_s for a KV-bound decode pool whose KV in use at the audit's peak fits KV_SETTLED_SHARE of
    one replica fewer (the flap guard then lets any step go once no tick asked for more for that long); else None."""
    after = policy.behavior.kv_settled_s
    if after is None or pool != Pool.DECODE or current <= 1 or _sized_by_itl(pool, memory, now_s):
        return None
    if not memory.kv_in_use or max(u for _, u in memory.kv_in_use) > KV_SETTLED_SHARE * (current - 1):
        return None
    return after


def _steady_for(memory: PoolMemory, now_s: float, for_s: float, tick_s: float) -> bool:
    """The arrival rate has read steady at every tick of the last ``for_s`` (as far as the memory goes back)."""
    return memory.unsteady_at_s is None or now_s - memory.unsteady_at_s >= for_s - JITTER_SHARE * tick_s


def recommend(policy: Policy, desired: Mapping[Pool, int], why: Mapping[Pool, tuple[Reason, ...]],
              allow_down: Mapping[Pool, bool], state: PlannerState, obs: Observation, now_s: float,
              rate_cv: float | None = None, rate_rising: bool = False) -> dict[Pool, Recommended]:
    """HPA's rules per pool: tolerance, stabilisation windows, rate limits, floors and ceilings.

    ``why`` carries the reasons of the stages before (demand, calibration, sizing); a pool that may not
    scale down (missing from the observation, or sized from a fallback forecast) keeps at least its size
    (reason no_data_hold), and so does every pool while ``rate_rising`` (reason rate_rising).
    The scale-down rules are ``behavior.steady``'s while ``rate_cv`` says the arrival rate is steady, the
    hedge (``behavior.scale_down``) otherwise.
    """
    rules = policy.behavior.for_rate_cv(rate_cv)
    # A settled prefill pool takes a step only under the steady rules, and only once they have held for the
    # settling time; decide()'s rate_cv is None (so the hedge) while the budget burns, is unmeasured or recovers,
    # so the recovery's rules never meet it.
    steady = policy.behavior.is_steady(rate_cv)
    held = recovery_rules(policy, rules)
    # Remembered for the recovery's hold too, so a pool entering recovery finds its lull's history in place.
    keep_s = max(_window(policy.behavior), _window(held), HALF_AFTER_S, SETTLED_AFTER_S,
                 policy.behavior.kv_settled_s or 0.0)  # the flap guard's quiet
    out = {}
    for pool in policy.pool_names():
        pool_rules = held if Reason.BUDGET_OVERSPENT in why[pool] else rules
        memory = state.pool(pool)
        if Reason.KV_BOUND in why[pool]:
            memory = replace(memory, kv_bound_at_s=now_s)
        if not steady:
            memory = replace(memory, unsteady_at_s=now_s)
        if policy.behavior.kv_settled_s is not None and pool == Pool.DECODE:  # only decode's release reads it
            memory = _with_kv_in_use(memory, obs.pools.get(pool), now_s, float(policy.interval_s))
        ready = obs.pools[pool].ready_replicas if pool in obs.pools else None
        current = current_replicas(policy.pool(pool), memory, ready)
        hold = Reason.NO_DATA_HOLD if not allow_down[pool] else Reason.RATE_RISING
        b = behave(desired[pool], current, memory, now_s, pool_rules, policy.pool(pool),
                   allow_down[pool] and not rate_rising, keep_s=keep_s, hold_reason=hold,
                   tick_s=float(policy.interval_s),
                   half_is_real_after_s=HALF_AFTER_S if _sized_by_itl(pool, memory, now_s) else None,
                   settled_after_s=SETTLED_AFTER_S if pool == Pool.PREFILL and _steady_for(
                       memory, now_s, SETTLED_AFTER_S, float(policy.interval_s))
                   else _kv_settled_s(policy, pool, memory, now_s, current))
        out[pool] = Recommended(current, b.replicas, b.memory, (*why[pool], *b.reasons))
    return out
