"""``dynamo-throughput``: NVIDIA Dynamo's SLA planner in its throughput-based mode, re-implemented from source.

Followed: ai-dynamo/dynamo, the argparse-era SLA planner on main at commit 002a7c3130e71d5849540cae64fcba2ed9e2d899
(February 2026: after PR #6145 added load-based scaling, before PR #7351 moved it to forward-pass metrics and
the planner to a PlannerConfig model). The source index we read holds commits, not tags, so the release tag is
not verified; this is the code of the v0.9 to v1.0 line. Files:
- ``components/src/dynamo/planner/utils/planner_core.py`` (002a7c31): ``observe_traffic_stats``,
  ``plan_adjustment`` (skip when TTFT/ITL/ISL/OSL is missing), ``Metrics.is_valid``, ``_throughput_loop``;
- ``.../utils/prefill_planner.py`` (002a7c31) and ``.../utils/decode_planner.py`` (the index holds no 002a7c31
  text of it; read at 0ff50012, which says ``config`` where 002a7c31 says ``args``): the correction factors and
  replica formulas;
- ``.../utils/disagg_planner.py`` (002a7c31): both pools from one observation, then the global GPU budget;
- ``.../utils/prometheus.py`` (002a7c31): ``increase(requests_total[interval])`` and interval means of the
  frontend's TTFT, ITL, ISL, OSL and request-duration histograms;
- ``.../utils/planner_argparse.py`` (002a7c31) and ``defaults.py``: adjustment interval 180 s, min endpoint 1,
  correction on, max GPU budget 8 (we use the policy's budget instead: see below), predictor ``arima``.

Every ``interval_s`` (180 s) over a window of the same length:
1. observe: requests *completed* in the window (``num_req``), mean TTFT, ITL, and ISL, OSL and request duration
   of the completed requests; feed num_req, ISL and OSL to the predictors (before any check, as Dynamo does);
2. skip (hold) when TTFT, ITL, ISL or OSL is missing;
3. correction factors: ``cf_p = TTFT / profile TTFT(ISL)``; ``cf_d = ITL / profile ITL(concurrency, ISL + OSL/2)``
   with the decode concurrency per replica from Little's law over the window,
   ``num_req / decode replicas x mean request duration / interval`` (not an instantaneous gauge);
4. predict next num_req, ISL, OSL;
5. prefill = ``max(ceil(num_req x ISL / interval x min(1, cf_p) / (u x tokens/s/GPU(ISL)) / GPUs), floor)``;
   decode = ``max(ceil(num_req x OSL / interval / (u x best tokens/s/GPU at ITL target / cf_d) / GPUs), floor)``;
6. Dynamo's global GPU budget. No stabilisation, no rate limit, no ceiling but the budget.

``u`` (``utilization``, default 1.0 = Dynamo as shipped) is our knob, not a Dynamo flag: Dynamo has no headroom
setting in this mode; its users buy headroom by planning against less capacity than profiled (a derated
profile, or a tighter ``--itl``). ``u`` is that derating, applied to both pools, so a sweep of it traces the
cost/attainment frontier Dynamo's users can reach. A non-default ``u`` is part of the controller's name.

Departures, and why:
- floors are the policy's per-pool ``min_replicas`` (Dynamo: one ``--min-endpoint`` for both); the budget is the
  policy's ``budget.max_gpus`` or none (Dynamo's default 8 GPUs would cap every trace at 8 GPUs);
- predictors re-expressed on statsmodels/numpy (``dynamo_predictors.py``); a value that is not the model's own
  forecast is flagged ``forecast_fallback`` with the reason in the Decision's detail, where Dynamo only logs;
- the profile is this project's piecewise-linear curves read at Dynamo's grid points (``dynamo_perf.py``);
- Dynamo's frontend figures are per model; the simulator's are per trace (one model);
- aggregated policies: prefill + decode needs on the one pool (Dynamo's agg planner is not modelled).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from planner.config import Policy
from planner.errors import UserError
from planner.profile import Profile
from planner.sim.evaluate.baselines.common import gpus_per_replica, make_decision
from planner.sim.evaluate.baselines.dynamo_perf import (
    DynamoDecodeView,
    DynamoPrefillView,
    dynamo_component_budget,
    dynamo_global_budget,
)
from planner.sim.evaluate.baselines.dynamo_predictors import Prediction, make_predictor
from planner.types import Decision, NoData, Observation, Reason

DYNAMO_SOURCE = "ai-dynamo/dynamo@002a7c31 components/src/dynamo/planner/utils (argparse-era SLA planner)"


@dataclass(frozen=True)
class _Observed:
    """Dynamo's ``Metrics`` for one adjustment interval."""

    num_req: float
    ttft_ms: float | None
    itl_ms: float | None
    isl: float | None
    osl: float | None
    duration_s: float | None
    decode_replicas: int


@dataclass(frozen=True)
class _Sizes:
    targets: dict[str, int]
    desired: dict[str, float]
    reasons: dict[str, tuple[Reason, ...]]
    detail: dict[str, float | str]


class DynamoThroughputController:
    def __init__(self, policy: Policy, profile: Profile, initial: Mapping[str, int], *, interval_s: float = 180.0,
                 predictor: str = "constant", utilization: float = 1.0, correction: bool = True,
                 name: str | None = None) -> None:
        if not (math.isfinite(utilization) and 0.0 < utilization <= 1.0):
            raise UserError(f"dynamo-throughput utilization: {utilization!r}; allowed: 0 < utilization <= 1")
        self.name = name or ("dynamo-throughput" if utilization == 1.0
                             else f"dynamo-throughput[utilization={utilization:g}]")
        self.policy = policy
        self.interval_s = interval_s
        self.utilization = utilization
        self.correction = correction
        self.gpus = gpus_per_replica(policy, profile)
        self.prefill = DynamoPrefillView(profile.prefill_curve(profile.selected_tp("prefill")))
        self.decode = DynamoDecodeView(profile.decode_curve(profile.selected_tp("decode")))
        self.current = dict(initial)
        self.predictor = predictor
        self.predictors = {k: make_predictor(predictor) for k in ("num_req", "isl", "osl")}
        self.cf_p = 1.0
        self.cf_d = 1.0
        # What a report shows of this baseline's settings (the name carries a non-default utilization).
        self.params: dict[str, float | str] = {"dynamo_source": DYNAMO_SOURCE, "mode": "throughput",
                                               "interval_s": interval_s, "predictor": predictor,
                                               "utilization": utilization, "correction": str(correction)}

    # ----------------------------------------------------------------------------------------- tick
    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        if isinstance(observation, NoData):
            return self._hold(now_s, f"no data ({observation.reason}: {observation.detail})")
        m = self._observe(observation)
        if isinstance(m, str):
            return self._hold(now_s, m)
        # Dynamo feeds the predictors before it checks the metrics (NaN becomes 0 there).
        self.predictors["num_req"].add_data_point(m.num_req)
        self.predictors["isl"].add_data_point(math.nan if m.isl is None else m.isl)
        self.predictors["osl"].add_data_point(math.nan if m.osl is None else m.osl)
        if m.ttft_ms is None or m.itl_ms is None or m.isl is None or m.osl is None:
            return self._hold(now_s, "TTFT, ITL, ISL or OSL missing in the window (no request finished): "
                                     "Dynamo skips the adjustment")
        conc = None
        if self.correction:
            conc = self._correct(m)
            if isinstance(conc, str):
                return self._hold(now_s, conc)
        preds = {k: p.predict_next() for k, p in self.predictors.items()}
        sizes = self._size(preds)
        self.current = sizes.targets
        detail = {**self.params, **sizes.detail, "observed_requests_completed": m.num_req,
                  "cf_prefill": self.cf_p, "cf_decode": self.cf_d}
        if conc is not None:
            detail["decode_concurrency_per_replica"] = conc
        notes = "; ".join(p.note for p in preds.values() if p.note)
        reasons: tuple[Reason, ...] = (Reason.BASELINE,)
        if notes:
            detail["predictor_note"] = notes
            reasons += (Reason.FORECAST_FALLBACK,)
        d = make_decision(now_s, sizes.targets, self.gpus, sizes.desired, sizes.reasons)
        return replace(d, reasons=reasons, detail=detail)

    def _hold(self, now_s: float, why: str) -> Decision:
        d = make_decision(now_s, self.current, self.gpus, reasons={p: (Reason.NO_DATA_HOLD,) for p in self.current})
        return replace(d, reasons=(Reason.BASELINE, Reason.NO_DATA_HOLD), detail={**self.params, "hold": why})

    def _observe(self, obs: Observation) -> _Observed | str:
        front = obs.pools.get("prefill") or obs.pools.get("aggregated")
        dec = obs.pools.get("decode") or obs.pools.get("aggregated")
        if front is None or dec is None:
            return f"observation has no prefill/decode (or aggregated) pool: {sorted(obs.pools)}"
        done = front.completed
        if done is None:
            return "observation lacks completed-request counts (Dynamo sizes from completed requests)"
        return _Observed(num_req=done.requests, ttft_ms=front.ttft_ms_mean, itl_ms=dec.itl_ms_mean,
                         isl=done.isl_mean, osl=done.osl_mean, duration_s=done.duration_s_mean,
                         decode_replicas=int(dec.ready_replicas or 0))

    def _correct(self, m: _Observed) -> float | None | str:
        """Dynamo's ``_update_correction_factor`` for both pools; the Little's-law decode concurrency per replica
        (None when no decode replica is ready: Dynamo then keeps the last decode factor), or why it skipped."""
        assert m.ttft_ms is not None and m.itl_ms is not None and m.isl is not None and m.osl is not None
        expect_ttft = self.prefill.ttft_ms(m.isl)
        if not expect_ttft > 0:
            return f"profile TTFT at ISL {m.isl:g} is {expect_ttft!r}: Dynamo skips the adjustment"
        self.cf_p = m.ttft_ms / expect_ttft
        if m.decode_replicas == 0:
            return None
        if m.duration_s is None:
            return "no request duration in the window: Dynamo skips the adjustment"
        conc = m.num_req / m.decode_replicas * m.duration_s / self.interval_s
        self.cf_d = m.itl_ms / self.decode.itl_ms(conc, m.isl + m.osl / 2)
        return conc

    # ----------------------------------------------------------------------------------------- size
    def _size(self, preds: Mapping[str, Prediction]) -> _Sizes:
        num_req, isl, osl = preds["num_req"].value, preds["isl"].value, preds["osl"].value
        u, interval = self.utilization, self.interval_s
        p_thpt = num_req * isl / interval * min(1.0, self.cf_p)  # Dynamo: prefill correction only shrinks
        p_need = p_thpt / (u * self.prefill.tokens_per_s_per_gpu(isl)) / self.gpus["prefill"]
        itl_target = self.policy.sla.itl_ms / self.cf_d if self.cf_d > 0 else self.policy.sla.itl_ms
        d_cap = self.decode.best_tokens_per_s_per_gpu(itl_target, isl + osl / 2)
        d_need = num_req * osl / interval / (u * d_cap) / self.gpus["decode"] if d_cap > 0 else 0.0
        detail: dict[str, float | str] = {"predicted_requests": num_req, "predicted_isl": isl, "predicted_osl": osl,
                                          "corrected_itl_ms": itl_target}
        if "aggregated" in self.current:
            return self._size_aggregated(p_need + d_need, detail)
        floors = {p: self.policy.pool(p).min_replicas for p in ("prefill", "decode")}
        want = {"prefill": max(math.ceil(p_need), floors["prefill"]),
                "decode": max(math.ceil(d_need), floors["decode"])}
        p, d, clamped = dynamo_global_budget(want["prefill"], want["decode"], self.gpus, floors,
                                             self.policy.budget.max_gpus)
        need = {"prefill": p_need, "decode": d_need}
        reasons = {k: (Reason.SLA_CAPACITY,) + ((Reason.FLOOR,) if math.ceil(need[k]) < floors[k] else ())
                   + ((Reason.BUDGET,) if clamped else ()) for k in need}
        return _Sizes({"prefill": p, "decode": d}, need, reasons, detail)

    def _size_aggregated(self, need: float, detail: dict[str, float | str]) -> _Sizes:
        floor = self.policy.pool("aggregated").min_replicas
        n, clamped = dynamo_component_budget(max(math.ceil(need), floor), self.gpus["aggregated"], floor,
                                             self.policy.budget.max_gpus)
        why = (Reason.SLA_CAPACITY,) + ((Reason.FLOOR,) if math.ceil(need) < floor else ()) \
            + ((Reason.BUDGET,) if clamped else ())
        detail["aggregated"] = "prefill + decode needs on one pool (Dynamo's agg planner is not modelled)"
        return _Sizes({"aggregated": n}, {"aggregated": need}, {"aggregated": why}, detail)
