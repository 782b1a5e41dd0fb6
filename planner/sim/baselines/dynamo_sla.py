"""``dynamo-sla``: NVIDIA Dynamo's SLA planner (throughput mode), re-implemented from its documented algorithm."""

from __future__ import annotations

import math
from collections.abc import Mapping

from planner.config import Policy
from planner.errors import UserError
from planner.profile import Profile
from planner.sim.baselines.common import budget_clamp, gpus_per_replica, make_decision
from planner.types import Decision, NoData, Observation, Reason


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
            raise UserError(f"dynamo_predictor: {predictor!r}; allowed: constant, arima", key="dynamo_predictor")
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
