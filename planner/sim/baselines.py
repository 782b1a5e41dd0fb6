"""Baseline scaling policies, each a Controller built from the Policy and the Profile.

- ``static``: fixed sizes (the backtest passes the oracle's peak).
- ``reactive``: HPA/KEDA-style thresholds with HPA's default behaviour (tolerance 10 %, scale-down
  stabilisation 300 s, scale-up at most max(+100 %, +4 pods) per 15 s, scale-down at most -100 % per 15 s).
  Metrics (HPA takes the largest desired count over its metrics), thresholds as an operator would set
  them from a load test of the profile: prefill: waiting requests per replica (target 2) and requests in
  prefill per replica (target 0.8); decode: waiting requests per replica (target 2), KV-cache usage (target
  0.7) and running sequences per replica (target 80 % of the profile's largest batch meeting the ITL target
  at its workload's context); aggregated: all of them.
- ``dynamo-sla``: a re-implementation of NVIDIA Dynamo's SLA planner (see :class:`DynamoSLAController`).
All hold their previous targets on NoData; none reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from planner.config import Policy
from planner.errors import UserError
from planner.profile import Profile
from planner.types import Decision, NoData, Observation, PoolDecision, Reason


def gpus_per_replica(policy: Policy, profile: Profile) -> dict[str, int]:
    p = profile.prefill_curve(profile.selected_tp("prefill")).gpus
    d = profile.decode_curve(profile.selected_tp("decode")).gpus
    return {"prefill": p, "decode": d, "aggregated": d}


def clamp_pool(policy: Policy, pool: str, n: int) -> tuple[int, tuple[Reason, ...]]:
    spec = policy.pool(pool)
    if n < spec.min_replicas:
        return spec.min_replicas, (Reason.FLOOR,)
    if n > spec.max_replicas:
        return spec.max_replicas, (Reason.CEILING,)
    return n, ()


def make_decision(now_s: float, targets: Mapping[str, int], gpus: Mapping[str, int],
                  desired: Mapping[str, float] | None = None,
                  reasons: Mapping[str, tuple[Reason, ...]] | None = None) -> Decision:
    pools = {p: PoolDecision(replicas=int(n), gpus_per_replica=gpus[p],
                             desired_unclamped=float((desired or {}).get(p, n)),
                             reasons=(reasons or {}).get(p, (Reason.BASELINE,)))
             for p, n in targets.items()}
    return Decision(at_s=now_s, pools=pools, reasons=(Reason.BASELINE,))


def budget_clamp(policy: Policy, targets: dict[str, int], gpus: Mapping[str, int]) -> tuple[dict[str, int], bool]:
    """Proportional GPU-budget clamp (Dynamo's): scale every pool by budget / wanted, floors kept."""
    cap = policy.budget.max_gpus
    total = sum(n * gpus[p] for p, n in targets.items())
    if cap is None or total <= cap:
        return targets, False
    f = cap / total
    out = {p: max(policy.pool(p).min_replicas, int(math.floor(n * f))) for p, n in targets.items()}
    return out, True


class StaticController:
    def __init__(self, policy: Policy, profile: Profile, targets: Mapping[str, int], name: str = "static") -> None:
        self.name = name
        self.interval_s = float(policy.interval_s)
        self.targets = dict(targets)
        self.gpus = gpus_per_replica(policy, profile)

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        return make_decision(now_s, self.targets, self.gpus)


# ------------------------------------------------------------------------------------------------ reactive
HPA_TOLERANCE = 0.1
HPA_DOWN_STABILISATION_S = 300.0
HPA_PERIOD_S = 15.0
QUEUE_PER_REPLICA_TARGET = 2.0
KV_USAGE_TARGET = 0.7
PREFILL_RUNNING_TARGET = 0.8
DECODE_BATCH_SHARE = 0.8


class ReactiveController:
    """HPA's algorithm: desired = ceil(current x metric / target), per metric, largest wins."""

    def __init__(self, policy: Policy, profile: Profile, initial: Mapping[str, int], interval_s: float = 15.0) -> None:
        self.name = "reactive"
        self.policy = policy
        self.interval_s = interval_s
        self.gpus = gpus_per_replica(policy, profile)
        self.current = dict(initial)
        dc = profile.decode_curve(profile.selected_tp("decode"))
        sel = profile.selection
        ctx = (sel.workload.isl + sel.workload.osl / 2) if sel else 1000.0
        self.decode_running_target = max(1.0, DECODE_BATCH_SHARE * dc.max_batch_meeting(policy.sla.itl_ms, ctx))
        # HPA would have been running before the replay: its window starts with the current size.
        self.recs: dict[str, deque[tuple[float, int]]] = {p: deque([(0.0, initial[p])]) for p in policy.pool_names()}

    def _desired(self, pool: str, obs: Observation) -> float | None:
        po = obs.pools.get(pool)
        if po is None:
            return None
        cur = max(1, self.current[pool])
        ready = max(1, po.ready_replicas or 0)
        ratios = [po.queue / ready / QUEUE_PER_REPLICA_TARGET]
        if pool == "prefill":
            ratios.append(po.running / ready / PREFILL_RUNNING_TARGET)
        else:
            ratios.append(po.running / ready / self.decode_running_target)
            if po.kv_usage is not None:
                ratios.append(po.kv_usage / KV_USAGE_TARGET)
        ratio = max(ratios)
        if abs(ratio - 1.0) <= HPA_TOLERANCE:
            return float(cur)
        return float(math.ceil(cur * ratio))

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        if isinstance(observation, NoData):
            return make_decision(now_s, self.current, self.gpus,
                                 reasons={p: (Reason.NO_DATA_HOLD,) for p in self.current})
        out: dict[str, int] = {}
        reasons: dict[str, tuple[Reason, ...]] = {}
        desired_raw: dict[str, float] = {}
        for pool in self.policy.pool_names():
            cur = self.current[pool]
            d = self._desired(pool, observation)
            if d is None:
                out[pool] = cur
                reasons[pool] = (Reason.NO_DATA_HOLD,)
                continue
            desired_raw[pool] = d
            n, why = clamp_pool(self.policy, pool, int(d))
            # scale-down stabilisation: the highest recommendation of the last 300 s
            recs = self.recs[pool]
            recs.append((now_s, n))
            while recs and recs[0][0] < now_s - HPA_DOWN_STABILISATION_S:
                recs.popleft()
            stab = max(r for _, r in recs)
            if n < cur and stab > n:
                n, why = min(stab, cur), why + (Reason.SCALE_DOWN_STABILIZED,)
            # rate limits per period (HPA defaults)
            up_limit = max(cur * 2, cur + 4)
            if n > up_limit:
                n, why = up_limit, why + (Reason.SCALE_UP_LIMIT,)
            out[pool] = n
            reasons[pool] = why or (Reason.BASELINE,)
        out, clamped = budget_clamp(self.policy, out, self.gpus)
        if clamped:
            reasons = {p: r + (Reason.BUDGET,) for p, r in reasons.items()}
        self.current = out
        return make_decision(now_s, out, self.gpus, desired_raw, reasons)


# ---------------------------------------------------------------------------------------------- dynamo-sla
class DynamoSLAController:
    """NVIDIA Dynamo's SLA planner, re-implemented from its documented algorithm.

    Every 180 s: predict request count, ISL and OSL for the next interval (``constant``: the last observed
    values; ``arima``: the registry's ARIMA forecaster one interval ahead), then
      prefill = max(ceil(req x ISL / interval x min(1, cf_p) / prefill_tok_s_per_gpu(ISL) / gpus_p), min)
        with cf_p = observed TTFT / profile TTFT(observed ISL);
      decode: ITL' = ITL target / cf_d (cf_d = observed ITL / profile ITL at the observed concurrency per
        replica and context ISL + OSL/2); the highest tok/s/GPU operating point with ITL <= ITL' at that
        context; decode = max(ceil(req x OSL / interval / that / gpus_d), min);
    then a proportional GPU-budget clamp. No hysteresis, no stabilisation. ``min`` is the pool's floor.
    Note ``min(1, cf_p)``: Dynamo's prefill correction can only shrink capacity; kept for faithfulness.
    """

    def __init__(self, policy: Policy, profile: Profile, initial: Mapping[str, int], interval_s: float = 180.0,
                 predictor: str = "constant") -> None:
        if predictor not in ("constant", "arima"):
            raise UserError(f"--dynamo-predictor: {predictor!r}; allowed: constant, arima")
        self.name = "dynamo-sla"
        self.policy = policy
        self.interval_s = interval_s
        self.gpus = gpus_per_replica(policy, profile)
        self.pc = profile.prefill_curve(profile.selected_tp("prefill"))
        self.dc = profile.decode_curve(profile.selected_tp("decode"))
        self.current = dict(initial)
        self.predictor = predictor
        self.history: list[tuple[float, float, float, float]] = []

    def _predict(self, req: float, isl: float, osl: float, now_s: float) -> tuple[float, float, float]:
        self.history.append((now_s, req, isl, osl))
        if self.predictor == "constant" or len(self.history) < 4:
            return req, isl, osl
        # Dynamo's ARIMA option, via the project's forecaster registry; constant on any failure.
        from planner.forecast import make_forecaster

        times = [h[0] for h in self.history]
        out = []
        for i, last in ((1, req), (2, isl), (3, osl)):
            try:
                f = make_forecaster("arima").fit(times, [h[i] for h in self.history]).forecast(self.interval_s)
                v = f.mean if f.ok and math.isfinite(f.mean) else last
            except Exception:  # noqa: BLE001 - a failed fit falls back to the last value, as Dynamo does
                v = last
            out.append(max(0.0, v))
        return out[0], out[1], out[2]

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        hold = make_decision(now_s, self.current, self.gpus, reasons={p: (Reason.NO_DATA_HOLD,) for p in self.current})
        if isinstance(observation, NoData):
            return hold
        front = observation.pools.get("prefill") or observation.pools.get("aggregated")
        dec = observation.pools.get("decode") or observation.pools.get("aggregated")
        if front is None or dec is None or front.requests <= 0 or front.isl_mean is None or front.osl_mean is None:
            return hold  # Dynamo skips the adjustment when there is no traffic to measure
        interval = self.interval_s
        req_obs = front.rate_rps * interval
        req, isl, osl = self._predict(req_obs, front.isl_mean, front.osl_mean, now_s)
        ctx = isl + osl / 2
        # prefill
        cf_p = 1.0
        if front.ttft_ms_mean is not None:
            cf_p = front.ttft_ms_mean / max(1e-9, self.pc.ttft_ms(front.isl_mean).value)
        thpt_p = self.pc.tokens_per_s_per_gpu(max(1.0, isl))
        p_need = req * isl / interval * min(1.0, cf_p) / thpt_p / self.gpus["prefill"]
        # decode
        cf_d = 1.0
        if dec.itl_ms_mean is not None:
            ready = max(1, dec.ready_replicas or 1)
            conc = max(1.0, dec.running / ready)
            cf_d = dec.itl_ms_mean / max(1e-9, self.dc.itl_ms(conc, ctx).value)
        itl_target = self.policy.sla.itl_ms / max(cf_d, 1e-9)
        batch = self.dc.max_batch_meeting(itl_target, ctx)
        batch = max(1, batch)  # Dynamo falls back to the lowest-latency point when nothing meets ITL'
        thpt_d = self.dc.tokens_per_s_per_gpu(batch, ctx)
        d_need = req * osl / interval / thpt_d / self.gpus["decode"]
        if "aggregated" in self.current:
            targets = {"aggregated": max(self.policy.pool("aggregated").min_replicas,
                                         math.ceil(p_need + d_need))}
            desired = {"aggregated": p_need + d_need}
        else:
            targets = {"prefill": max(self.policy.pool("prefill").min_replicas, math.ceil(p_need)),
                       "decode": max(self.policy.pool("decode").min_replicas, math.ceil(d_need))}
            desired = {"prefill": p_need, "decode": d_need}
        targets, clamped = budget_clamp(self.policy, targets, self.gpus)
        self.current = targets
        why = (Reason.SLA_CAPACITY, Reason.BUDGET) if clamped else (Reason.SLA_CAPACITY,)
        return make_decision(now_s, targets, self.gpus, desired, {p: why for p in targets})


# ---------------------------------------------------------------------------------------------- stand-in
class StandInPlanner:
    """STAND-IN for the decision core (used only while planner.decide.controller is missing).

    Reads the policy file: sizes each pool from the last window's offered load with a 80 % utilisation
    target (prefill: rate x ISL / prefill tokens/s per replica; decode: rate x OSL / tokens/s per replica
    at the largest batch meeting the ITL target at context ISL + OSL/2), floors/ceilings, budget, and the
    policy's scale-down stabilisation window. No forecast, no calibration.
    """

    UTIL = 0.8

    def __init__(self, policy: Policy, profile: Profile, initial: Mapping[str, int]) -> None:
        self.name = "planner"
        self.policy = policy
        self.interval_s = float(policy.interval_s)
        self.gpus = gpus_per_replica(policy, profile)
        self.pc = profile.prefill_curve(profile.selected_tp("prefill"))
        self.dc = profile.decode_curve(profile.selected_tp("decode"))
        self.current = dict(initial)
        self.recs: dict[str, deque[tuple[float, int]]] = {p: deque() for p in policy.pool_names()}

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        if isinstance(observation, NoData):
            return make_decision(now_s, self.current, self.gpus,
                                 reasons={p: (Reason.NO_DATA_HOLD,) for p in self.current})
        front = observation.pools.get("prefill") or observation.pools.get("aggregated")
        assert front is not None
        rate = front.rate_rps
        isl = front.isl_mean or 1000.0
        osl = front.osl_mean or 200.0
        ctx = isl + osl / 2
        p_tok_s = self.pc.tokens_per_s_per_gpu(isl) * self.pc.gpus
        batch = max(1, self.dc.max_batch_meeting(self.policy.sla.itl_ms, ctx))
        d_tok_s = self.dc.tokens_per_s_per_gpu(batch, ctx) * self.dc.gpus
        need = {"prefill": rate * isl / p_tok_s / self.UTIL, "decode": rate * osl / d_tok_s / self.UTIL}
        if self.policy.mode == "aggregated":
            need = {"aggregated": need["prefill"] + need["decode"]}
        out: dict[str, int] = {}
        reasons: dict[str, tuple[Reason, ...]] = {}
        window = self.policy.behavior.scale_down.stabilization_window_s
        for pool, x in need.items():
            n, why = clamp_pool(self.policy, pool, math.ceil(x))
            recs = self.recs[pool]
            recs.append((now_s, n))
            while recs and recs[0][0] < now_s - window:
                recs.popleft()
            stab = max(r for _, r in recs)
            if stab > n:
                n, why = stab, why + (Reason.SCALE_DOWN_STABILIZED,)
            out[pool] = n
            reasons[pool] = (Reason.SLA_CAPACITY, *why)
        out, clamped = budget_clamp(self.policy, out, self.gpus)
        self.current = out
        return make_decision(now_s, out, self.gpus, need, reasons)
