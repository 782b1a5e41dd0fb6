"""decide(spec, observation, forecast, state, now_s) -> (Decision, PlannerState).

Pure: no I/O, no clock. The same function runs in the controller, the simulator and backtests. ``spec`` is
built once from the policy and the profile (``DeciderSpec.build``). The decision, in order, one stage each:

  1. Demand (decide/demand.py). NoData, or an observation older than ``spec.stale_after_s`` (the metrics
     source's ``stale_after_intervals`` intervals), holds every pool (never scale down on missing data).
     Otherwise the load at the horizon ``startup_s + interval_s``: the rate forecast at the quantile the
     error budget allows (decide/error_budget.py: ``sla.lean_quantile`` while the SLA's budget is healthy,
     ``forecast.quantile`` when it burns fast or is unknown, ``sla.recover_quantile`` once it is spent (to ``sla.recover_below``), or
     ``forecast.quantile`` always with ``sla.budget_control`` off; reasons budget_lean / budget_burning /
     budget_overspent / budget_unmeasured), never negative, at most 2x its mean; mean ISL
     and OSL, each pool's work quantile and any backlog it holds. A forecast that failed
     falls back to the observed window (reason forecast_fallback); measured zero traffic with a zero
     forecast sizes the pools to their floors.
  2. Calibration (decide/calibration.py): observed vs predicted TTFT/ITL at the observed load and size
     updates a bounded factor (both directions) that multiplies the predictions of stage 3 and decays with
     ``half_life_s``.
  3. Size each pool (decide/size.py) at the SLA's percentile, or a stricter one while the error budget is spent
     and the window can still be brought back (``sla.recover_miss_share`` below 1; reason budget_tightened):
     prefill, the smallest pool whose TTFT percentile (M/G/c wait + prefill compute + KV transfer over
     ``kv_link`` + first decode step) meets ``sla.ttft_ms``; decode, the largest
     batch whose ITL at the forecast context meets ``sla.itl_ms`` and whose KV fits, and replicas from
     Little's concurrency plus its Poisson spread at the percentile, the sequences decode runs now beyond
     that batch on its ready replicas drained as a backlog over the horizon (reason decode_over_batch: the
     output length engines export is read from finished requests, which an overloaded pool under-reads);
     aggregated, one pool against both.
  4. Behaviour (decide/behavior.py): HPA's rules per pool (tolerance, stabilisation windows, rate policies,
     floors, ceilings); a pool missing from the observation or sized from a fallback forecast may scale up
     but not down. The scale-down rules are ``behavior.steady``'s while the forecast's ``rate_cv`` says the
     arrival rate is steady, the hedge (``behavior.scale_down``) while it is bursty or unknown, or while the
     error budget burns fast, is spent or is not yet measured (reasons budget_burning, budget_overspent,
     budget_unmeasured).
  5. Budget (decide/budget.py): when the pools together ask for more than ``budget.max_gpus``, the GPUs go
     to the pool under the most SLA pressure, floors first.
  6. Floors: whatever the stages above did, no pool leaves [min_replicas, max_replicas].
  7. Scale to zero (every pool at min_replicas 0): all pools to zero once no request was measured for
     ``scale_to_zero_after_s`` (reason zero_traffic), at least one replica each before that (idle_window) and
     as soon as a request is seen again (wake_together): prefill and decode sleep and wake together.
     Requests held at the router (``Observation.waiting``, the router's wake signal) are traffic too; a
     policy at zero has no replica to measure, so an observation that carries only them (no pool) wakes
     every pool to at least one replica at once (``wake``), without the stages above.
Every stage that changes a number records a Reason; the Decision carries replicas, reasons and the
predicted TTFT/ITL at the chosen sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from planner.decide.behavior import Recommended, commit, current_replicas, recommend
from planner.decide.budget import apply_budget, fit_budget
from planner.decide.calibration import Factors, calibrate
from planner.decide.capacity import Load, Sizing, aggregated_latency_ms, decode_itl_ms, prefill_ttft_ms
from planner.decide.demand import Demand, Hold, check_data, demand, finite, measured_idle, observed_load
from planner.decide.size import size_pools
from planner.decide.spec import DeciderSpec
from planner.decide.state import PlannerState
from planner.types import Decision, LengthMix, LoadForecast, NoData, Observation, Pool, PoolDecision, Reason


def decide(spec: DeciderSpec, observation: Observation | NoData, forecast: LoadForecast | None,
           state: PlannerState | None, now_s: float) -> tuple[Decision, PlannerState]:
    state = state or PlannerState()
    if _only_waiting(spec, observation):
        assert isinstance(observation, Observation)
        return wake(spec, state, now_s, observation.waiting)
    obs = check_data(spec, observation, now_s)
    if isinstance(obs, Hold):
        return hold(spec, state, now_s, observation if isinstance(observation, Observation) else None, obs.why)
    dem = demand(spec, obs, forecast)  # 1
    if isinstance(dem, Hold):
        return hold(spec, state, now_s, obs, dem.why)
    factors, state = calibrate(spec, obs, state, now_s)  # 2
    sized = size_pools(spec, dem, factors)  # 3
    fallback = Reason.FORECAST_FALLBACK in dem.reasons
    rate_cv = steady_gate(dem, forecast)
    recommended = recommend(spec.policy, {p: 0 if dem.zero else s.replicas for p, s in sized.items()},  # 4
                            _reasons_so_far(dem, factors, sized),
                            {p: p in obs.pools and not fallback for p in spec.pools}, state, obs, now_s, rate_cv,
                            rate_rising(spec, forecast))
    budgeted, cut = apply_budget(spec, {p: r.replicas for p, r in recommended.items()}, dem, factors)  # 5
    final = hold_floors(spec, budgeted)  # 6
    final, state = idle_window(spec, final, measured_idle(spec, obs), state, now_s)  # 7
    return _record(spec, dem, factors, sized, recommended, final, cut, state, now_s, rate_cv,
                   forecast.rate_rise if forecast is not None else None)


def rate_rising(spec: DeciderSpec, forecast: LoadForecast | None) -> bool:
    """Whether the arrival rate rose past ``behavior.rise_hold`` since the last read (no scale-down this tick)."""
    hold = spec.policy.behavior.rise_hold
    rise = forecast.rate_rise if forecast is not None else None
    return hold is not None and rise is not None and rise > hold


def steady_gate(dem: Demand, forecast: LoadForecast | None) -> float | None:
    """The burstiness that picks the scale-down rules (None: unknown, so the hedge). While the error budget burns
    fast (or is not yet measured) the hedge holds even on steady traffic: the steady rules give capacity back at
    once, and a budget already being spent cannot also pay for the rebound that follows a scale-down."""
    hedged = {Reason.BUDGET_BURNING, Reason.BUDGET_OVERSPENT, Reason.BUDGET_UNMEASURED}
    if forecast is None or hedged & set(dem.reasons):
        return None
    return forecast.rate_cv


def _reasons_so_far(dem: Demand, factors: Factors, sized: Mapping[Pool, Sizing]) -> dict[Pool, tuple[Reason, ...]]:
    """Per pool, the reasons of stages 1-3: what sized it, the demand's caveats, calibration, sizing limits."""
    base = (Reason.ZERO_TRAFFIC,) if dem.zero else (Reason.SLA_CAPACITY,)
    return {p: (*base, *dem.reasons, *(() if dem.zero else factors.reasons_for(p)), *s.reasons)
            for p, s in sized.items()}


def hold_floors(spec: DeciderSpec, replicas: Mapping[Pool, int]) -> dict[Pool, tuple[int, tuple[Reason, ...]]]:
    """Stage 6: each pool within [min_replicas, max_replicas], with the reason when that moved it."""
    out: dict[Pool, tuple[int, tuple[Reason, ...]]] = {}
    for pool, n in replicas.items():
        bounds = spec.policy.pool(pool)
        kept = min(max(n, bounds.min_replicas), bounds.max_replicas)
        why: tuple[Reason, ...] = () if kept == n else (Reason.FLOOR,) if kept > n else (Reason.CEILING,)
        out[pool] = (kept, why)
    return out


def idle_window(spec: DeciderSpec, final: Mapping[Pool, tuple[int, tuple[Reason, ...]]], idle: bool,
                state: PlannerState, now_s: float) -> tuple[dict[Pool, tuple[int, tuple[Reason, ...]]], PlannerState]:
    """Stage 7, for a policy whose pools may go to zero (every min_replicas 0), as Knative's grace period: after
    ``scale_to_zero_after_s`` with no request measured (``idle``: none started, none queued; the first tick
    starts the window) every pool goes to zero at once, whatever the forecast still expects (reason
    zero_traffic); before that, and as soon as a request is seen again, each pool has at least one replica
    (idle_window while the window runs, wake_together on traffic): prefill and decode sleep and wake together."""
    out = dict(final)
    if not spec.policy.scales_to_zero():
        return out, state
    last = now_s if not idle or state.last_traffic_s is None else state.last_traffic_s
    state = replace(state, last_traffic_s=last)
    if idle and now_s - last >= spec.policy.scale_to_zero_after_s:
        return {p: (0, why if n == 0 else (*why, Reason.ZERO_TRAFFIC)) for p, (n, why) in out.items()}, state
    woken = [pool for pool, (n, _) in out.items() if n == 0]
    for pool in woken:
        out[pool] = (1, (*out[pool][1], Reason.IDLE_WINDOW if idle else Reason.WAKE_TOGETHER))
    return (_within_budget(spec, out) if woken else out), state


def _within_budget(spec: DeciderSpec, out: Mapping[Pool, tuple[int, tuple[Reason, ...]]]
                   ) -> dict[Pool, tuple[int, tuple[Reason, ...]]]:
    """The idle window's one replica a pool is a promise, as a floor is, made after stage 5 fitted the budget: the
    pools above one replica give way to it within ``budget.max_gpus`` (reason budget). A prefill pool held at 2 by
    its scale-down limit beside a decode pool woken to one 2-GPU replica had asked 4 GPUs of a budget of 2.
    The cut is ordered by the share each pool would lose, not by SLA pressure: a pool is at zero here when the demand
    is zero (what other pools hold above one replica no load needs) or when stage 5 could not give it a replica at
    all (and then little of the budget is left above one replica each to order)."""
    alloc, cut = fit_budget({p: n for p, (n, _) in out.items()}, {p: spec.gpus(p) for p in out},
                            {p: 1 for p in out}, spec.policy.budget.max_gpus, lambda _p, _c: 0.0)
    return {p: (alloc[p], (*why, Reason.BUDGET) if p in cut else why) for p, (_, why) in out.items()}


def _only_waiting(spec: DeciderSpec, observation: Observation | NoData) -> bool:
    return (spec.policy.scales_to_zero() and isinstance(observation, Observation) and observation.waiting > 0
            and not observation.pools)


def wake(spec: DeciderSpec, state: PlannerState, now_s: float, waiting: int) -> tuple[Decision, PlannerState]:
    """Requests wait at the router and no pool can be measured (a policy at zero has no replica, so no series):
    every pool to at least one replica, within its ceiling (reason wake_together), and the idle window starts
    again now. Nothing is sized: the next tick sizes from what the woken replicas measure."""
    pools: dict[str, PoolDecision] = {}
    for pool in spec.pools:
        memory = state.pool(pool)
        current = current_replicas(spec.policy.pool(pool), memory, None)
        replicas = min(max(current, 1), spec.policy.pool(pool).max_replicas)
        pools[pool] = PoolDecision(replicas, spec.gpus(pool), float(replicas), (Reason.WAKE_TOGETHER,))
        state = state.with_pool(pool, commit(memory, current, replicas, now_s, spec.policy.behavior))
    decision = Decision(now_s, pools, (Reason.WAKE_TOGETHER,), detail={"waiting": float(waiting)})
    return decision, replace(state, at_s=now_s, last_traffic_s=now_s)


def hold(spec: DeciderSpec, state: PlannerState, now_s: float, obs: Observation | None,
         why: str) -> tuple[Decision, PlannerState]:
    """Every pool keeps its size (within its floor and ceiling): nothing trustworthy to size from."""
    currents = {}
    for pool in spec.pools:
        memory = state.pool(pool)
        ready = obs.pools[pool].ready_replicas if obs is not None and pool in obs.pools else None
        if memory.target is None and ready is None:
            # Nothing known about this pool's size (first tick, no data): leave it out of the Decision so
            # the actuator leaves it alone; any number here would be a guess, and a low one a scale-down.
            continue
        currents[pool] = current_replicas(spec.policy.pool(pool), memory, ready)
    pools: dict[str, PoolDecision] = {}
    for pool, (replicas, bounded) in hold_floors(spec, currents).items():
        pools[pool] = PoolDecision(replicas, spec.gpus(pool), float(currents[pool]), (Reason.NO_DATA_HOLD, *bounded))
        state = state.with_pool(pool, commit(state.pool(pool), currents[pool], replicas, now_s, spec.policy.behavior))
    decision = Decision(now_s, pools, (Reason.NO_DATA_HOLD,), detail={"hold": why})  # may omit unknown pools
    return decision, replace(state, at_s=now_s)


def _predicted(spec: DeciderSpec, dem: Demand, factors: Factors, pool: Pool,
               replicas: int) -> tuple[float | None, float | None]:
    """(TTFT, ITL) the model predicts for ``pool`` at ``replicas`` at the demand's load (None where the pool does
    not set it)."""
    return latency_at(spec, pool, dem.for_pool(pool), replicas, factors, dem.isl_mix)


def latency_at_observed(spec: DeciderSpec, obs: Observation,
                        in_force: Decision | None) -> dict[Pool, tuple[float | None, float | None]]:
    """``latency_of_ready`` at the load the observation measured (its arrival rate, mean lengths and prompt-length
    mix) and its pools' ready replicas: the live twin of a replay's prediction at the load that came
    (planner/sim/evaluate/model_bias.py). Empty when no rate or prompt length was measured."""
    load = observed_load(spec, obs)
    if load is None:
        return {}
    front = spec.mode.ttft_pool
    mix = LengthMix.from_buckets(obs.pools[front].isl_buckets) if front in obs.pools else None
    ready = {p: o.ready_replicas or 0 for p, o in obs.pools.items()}
    return latency_of_ready(spec, load, mix, ready, in_force)


def latency_of_ready(spec: DeciderSpec, load: Load, mix: LengthMix | None, ready: Mapping[str, int],
                     in_force: Decision | None) -> dict[Pool, tuple[float | None, float | None]]:
    """Per pool with ready replicas, (TTFT, ITL) the model with ``in_force``'s calibration factors predicts for
    them serving ``load``; empty when ``in_force`` did not size (a hold records no factors)."""
    factors = Factors.of(in_force)
    if factors is None:
        return {}
    return {pool: latency_at(spec, pool, load, n, factors, mix)
            for pool in spec.pools if (n := int(ready.get(pool, 0))) > 0}


def latency_at(spec: DeciderSpec, pool: Pool, load: Load, replicas: int, factors: Factors,
               mix: LengthMix | None) -> tuple[float | None, float | None]:
    """(TTFT, ITL) the model, with the calibration ``factors``, predicts for ``pool`` at ``replicas`` serving
    ``load`` (None where the pool does not set it): a decision asks it at the load it forecast, a replay at the
    load that came (the model's own error, the forecast's headroom left out: model_bias.py)."""
    if pool is Pool.AGGREGATED:
        return aggregated_latency_ms(spec.model, load, replicas, factors.ttft, factors.itl, mix)
    if pool is Pool.PREFILL:
        return prefill_ttft_ms(spec.model, load, replicas, factors.ttft, mix), None
    return None, decode_itl_ms(spec.model, load, replicas, factors.itl, mix)


def _record(spec: DeciderSpec, dem: Demand, factors: Factors, sized: Mapping[Pool, Sizing],
            recommended: Mapping[Pool, Recommended], final: Mapping[Pool, tuple[int, tuple[Reason, ...]]],
            cut: set[Pool], state: PlannerState, now_s: float, rate_cv: float | None,
            rate_rise: float | None = None) -> tuple[Decision, PlannerState]:
    """The Decision (replicas, reasons, predictions) and the state that remembers it."""
    pools: dict[str, PoolDecision] = {}
    for pool in spec.pools:
        rec = recommended[pool]
        replicas, bounded = final[pool]
        reasons = (*rec.reasons, *((Reason.BUDGET,) if pool in cut else ()), *bounded)
        state = state.with_pool(pool, commit(rec.memory, rec.current, replicas, now_s, spec.policy.behavior))
        ttft, itl = _predicted(spec, dem, factors, pool, replicas)
        pools[pool] = PoolDecision(replicas, spec.gpus(pool), sized[pool].desired, _dedupe(reasons),
                                   finite(ttft), finite(itl))
    detail: Mapping[str, float | str] = {
        "rate_rps": dem.load.rate_rps, "isl_tokens": dem.load.isl_tokens, "osl_tokens": dem.load.osl_tokens,
        "prefill_rate_rps": dem.prefill.rate_rps, "decode_rate_rps": dem.decode.rate_rps,
        "ttft_factor": factors.ttft, "itl_factor": factors.itl,
        "ttft_unservable_share": sized[spec.mode.ttft_pool].unservable_share,
        "scale_down_rules": "steady" if spec.policy.behavior.is_steady(rate_cv) else "hedge",
        "sizing_percentile": spec.model.percentile if dem.percentile is None else dem.percentile,
    }
    if dem.quantile is not None:
        detail = {**detail, "headroom_quantile": dem.quantile}
    if dem.quantile is not None and Pool.DECODE in sized:  # the quantile whose load set decode's size
        guarded = Reason.DECODE_KV_GUARD in sized[Pool.DECODE].reasons  # the guard sizes at forecast.quantile
        detail = {**detail, "decode_quantile": spec.policy.forecast.quantile if guarded else dem.quantile}
    if rate_cv is not None:
        detail = {**detail, "rate_cv": rate_cv}
    if rate_rise is not None:
        detail = {**detail, "rate_rise": rate_rise}
    decision = Decision(now_s, pools, _dedupe(r for p in spec.pools for r in pools[p].reasons),
                        pools[spec.mode.ttft_pool].predicted_ttft_ms, pools[spec.mode.itl_pool].predicted_itl_ms,
                        detail)
    return decision, replace(state, at_s=now_s)


def _dedupe(reasons: Iterable[Reason]) -> tuple[Reason, ...]:
    return tuple(dict.fromkeys(reasons))
