"""``reactive``: HPA/KEDA-style thresholds with HPA's default behaviour (tolerance 10 %, scale-down
stabilisation 300 s, scale-up at most max(+100 %, +4 pods) per 15 s, scale-down at most -100 % per 15 s),
applied by the same behaviour function the planner uses (planner/decide/behavior.py ``behave``).

Metrics (HPA takes the largest desired count over its metrics), thresholds as an operator would set them from
a load test of the profile: prefill: waiting requests per replica (target 2) and requests in prefill per
replica (target 0.8); decode: waiting requests per replica (target 2), KV-cache usage (target 0.7) and running
sequences per replica (target 80 % of the profile's largest batch meeting the ITL target at its workload's
context); aggregated: all of them. Holds its previous targets on NoData; reads no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from planner.config import Behavior, Policy, ScalingPolicy, ScalingRules
from planner.decide.behavior import behave, commit
from planner.decide.state import PoolMemory
from planner.errors import UserError
from planner.profile import Profile
from planner.sim.evaluate.baselines.common import budget_clamp, gpus_per_replica, make_decision
from planner.types import Decision, NoData, Observation, Reason

HPA_TOLERANCE = 0.1  # on the metric's usage ratio, before the behaviour (kube's replica calculator)
HPA_PERIOD_S = 15.0
# HPA's default behaviour (autoscaling/v2): scale up by max(4 pods, 100 %) per 15 s with no stabilisation,
# scale down by up to 100 % per 15 s after a 300 s stabilisation window.
HPA_DEFAULT_BEHAVIOR = Behavior(
    tolerance=0.0,
    scale_up=ScalingRules(stabilization_window_s=0, select_policy="max", policies=[
        ScalingPolicy(type="pods", value=4, period_s=15), ScalingPolicy(type="percent", value=100, period_s=15)]),
    scale_down=ScalingRules(stabilization_window_s=300, select_policy="max", policies=[
        ScalingPolicy(type="percent", value=100, period_s=15)]),
)
QUEUE_PER_REPLICA_TARGET = 2.0
KV_USAGE_TARGET = 0.7
PREFILL_RUNNING_TARGET = 0.8
DECODE_BATCH_SHARE = 0.8


class ReactiveController:
    """HPA's algorithm: desired = ceil(current x metric / target), per metric, largest wins."""

    def __init__(self, policy: Policy, profile: Profile, initial: Mapping[str, int], interval_s: float = 15.0,
                 target_scale: float = 1.0) -> None:
        # target_scale multiplies every threshold: below 1 scales out earlier (more headroom), as an operator
        # who tightens the targets would; the frontier sweeps it. A non-default scale is part of the name.
        if not (math.isfinite(target_scale) and target_scale > 0):
            raise UserError(f"reactive target_scale: {target_scale!r}; allowed: a number > 0", key="target_scale")
        self.name = "reactive" if target_scale == 1.0 else f"reactive[target_scale={target_scale:g}]"
        self.policy = policy
        self.interval_s = interval_s
        self.gpus = gpus_per_replica(policy, profile)
        self.current = dict(initial)
        dc = profile.decode_curve(profile.selected_tp("decode"))
        sel = profile.selection
        ctx = (sel.workload.isl + sel.workload.osl / 2) if sel else 1000.0
        self.queue_target = QUEUE_PER_REPLICA_TARGET * target_scale
        self.prefill_running_target = PREFILL_RUNNING_TARGET * target_scale
        self.kv_usage_target = KV_USAGE_TARGET * target_scale
        self.decode_running_target = max(1.0, DECODE_BATCH_SHARE * dc.max_batch_meeting(policy.sla.itl_ms, ctx)
                                         * target_scale)
        self.params: dict[str, float | str] = {"target_scale": target_scale}
        # HPA would have been running before the replay: its window starts with the current size.
        self.memory: dict[str, PoolMemory] = {p: PoolMemory(target=initial[p], recommendations=((0.0, initial[p]),))
                       for p in policy.pool_names()}

    def _desired(self, pool: str, obs: Observation) -> float | None:
        po = obs.pools.get(pool)
        if po is None:
            return None
        cur = max(1, self.current[pool])
        ready = max(1, po.ready_replicas or 0)
        ratios = [po.queue / ready / self.queue_target]
        if pool == "prefill":
            ratios.append(po.running / ready / self.prefill_running_target)
        else:
            ratios.append(po.running / ready / self.decode_running_target)
            if po.kv_usage is not None:
                ratios.append(po.kv_usage / self.kv_usage_target)
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
            b = behave(int(d), cur, self.memory[pool], now_s, HPA_DEFAULT_BEHAVIOR, self.policy.pool(pool),
                       flap_guard=False)
            self.memory[pool] = b.memory
            out[pool] = b.replicas
            reasons[pool] = b.reasons or (Reason.BASELINE,)
        out, clamped = budget_clamp(self.policy, out, self.gpus)
        if clamped:
            reasons = {p: r + (Reason.BUDGET,) for p, r in reasons.items()}
        for name, n in out.items():
            self.memory[name] = commit(self.memory[name], self.current[name], n, now_s, HPA_DEFAULT_BEHAVIOR)
        self.current = out
        return make_decision(now_s, out, self.gpus, desired_raw, reasons)
