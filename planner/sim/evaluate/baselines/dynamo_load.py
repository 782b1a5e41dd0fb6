"""``dynamo-load``: NVIDIA Dynamo's SLA planner in its load-based scaling mode, re-implemented from source.

Followed: ai-dynamo/dynamo on main at commit 002a7c3130e71d5849540cae64fcba2ed9e2d899 (the same snapshot as
``dynamo_throughput.py``; the mode came with PR #6145, merged 2026-02-13, and was rebuilt on forward-pass
metrics by PR #7351 a month later). Files:
- ``components/src/dynamo/planner/utils/load_based_regression.py`` (stored version ef9dc051):
  ``LoadBasedRegressionModel``: sliding-window least squares y = m x + b; ``predict_x_from_sla`` solves
  x = (SLA - b) / m, clamped at 0; with a non-positive slope it falls back to the smallest observed x whose y
  was under the SLA (else the smallest x);
- ``.../utils/planner_core.py`` (002a7c31): ``observe_engine_load_stats`` (prefill: x = active prefill tokens +
  last ISL, y = last TTFT in ms; decode: x = active decode blocks, y = last ITL in ms; a point only when both are
  positive), ``_loadbased_loop`` (applies with ``blocking=True``);
- ``.../utils/prefill_planner.py`` (002a7c31), ``.../utils/decode_planner.py`` (read at 0ff50012, the nearest
  stored version; it reads the most recent rather than the averaged per-worker sample, moot here):
  ``loadbased_plan_adjustment``: target = x at the SLA (prefill: minus the mean ISL); +1 replica when *every*
  worker is above the target; -1 when there is more than one and every worker is below
  ``target x (N - 1) / N x sensitivity / 100``; decode skips when its target is <= 0;
- ``.../utils/disagg_planner.py`` (002a7c31): scale up if either pool wants to, down only if both want to, each
  by its own decision; then the global GPU budget;
- ``.../utils/planner_argparse.py`` and ``defaults.py``: interval 5 s, learning window 50, minimum observations 5,
  scale-down sensitivity 80, 10 metric samples per interval.

Every ``interval_s`` (5 s) over a 5 s window: hold while a previous scale is still starting (Dynamo's blocking
apply); feed both regressions; decide prefill and decode; combine; budget.

Departures, and why:
- Dynamo reads per-worker gauges from the router (averaged over 10 samples in the interval) and needs *all*
  workers past a threshold; the simulator exposes pool gauges at the tick, so each worker is taken to be at the
  pool's mean (its router balances load): active prefill tokens per worker = (queued + running prefill
  requests) / ready replicas x mean ISL; active decode KV per worker = KV usage x KV capacity, in tokens rather
  than blocks (a constant factor the regression absorbs); last TTFT/ITL = the window's mean;
- this is load-based scaling alone (Dynamo's ``--disable-throughput-scaling --enable-loadbased-scaling``): with
  both enabled Dynamo uses the throughput sizes as a floor, which needs two windows (180 s and 5 s) per tick;
- never below the policy's per-pool ``min_replicas`` (Dynamo's loop only refuses to go below one replica);
- aggregated policies: both regressions on the one pool, up if either wants, down if both do.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from planner.config import Policy
from planner.profile import Profile
from planner.sim.evaluate.baselines.common import gpus_per_replica, make_decision
from planner.sim.evaluate.baselines.dynamo_perf import dynamo_component_budget, dynamo_global_budget
from planner.sim.evaluate.baselines.dynamo_throughput import DYNAMO_SOURCE
from planner.types import Decision, NoData, Observation, PoolObservation, Reason


class LoadRegression:
    """Dynamo's ``LoadBasedRegressionModel``: least squares over the last ``window`` (x, y) points."""

    def __init__(self, window: int = 50, min_observations: int = 5) -> None:
        self.points: deque[tuple[float, float]] = deque(maxlen=window)
        self.min_observations = min_observations

    def add(self, x: float, y: float) -> None:
        self.points.append((x, y))

    def ready(self) -> bool:
        return len(self.points) >= self.min_observations

    def fit(self) -> tuple[float, float]:
        """(slope, intercept); a slope of 0 when every x is the same (as scikit-learn's LinearRegression)."""
        x = np.array([p[0] for p in self.points])
        y = np.array([p[1] for p in self.points])
        var = float(np.var(x))
        slope = float(np.mean((x - x.mean()) * (y - y.mean())) / var) if var > 0 else 0.0
        return slope, float(y.mean() - slope * x.mean())

    def x_at(self, y_sla: float) -> float | None:
        if not self.ready():
            return None
        slope, intercept = self.fit()
        if slope <= 0:  # more load must cost latency; else the observed heuristic
            below = [x for x, y in self.points if y < y_sla]
            return max(0.0, min(below) if below else min(x for x, _ in self.points))
        return max(0.0, (y_sla - intercept) / slope)


def step_decision(active_per_worker: float, target: float, workers: int, sensitivity_pct: float) -> int | None:
    """Dynamo's ±1 rule: up when (every worker) is above ``target``; down when there is more than one worker and
    (every worker) is below ``target x (N - 1) / N x sensitivity``; else None (no action)."""
    if active_per_worker > target:
        return workers + 1
    if workers > 1 and active_per_worker < target * (workers - 1) / workers * sensitivity_pct / 100.0:
        return workers - 1
    return None


class DynamoLoadController:
    def __init__(self, policy: Policy, profile: Profile, initial: Mapping[str, int], *, interval_s: float = 5.0,
                 learning_window: int = 50, min_observations: int = 5, scaling_down_sensitivity: float = 80.0,
                 name: str = "dynamo-load") -> None:
        self.name = name
        self.policy = policy
        self.interval_s = interval_s
        self.sensitivity = scaling_down_sensitivity
        self.gpus = gpus_per_replica(policy, profile)
        self.kv_capacity_tokens = float(profile.decode_curve(profile.selected_tp("decode")).kv_capacity_tokens)
        self.current = dict(initial)
        self.ttft = LoadRegression(learning_window, min_observations)
        self.itl = LoadRegression(learning_window, min_observations)
        self.last_isl = 0.0  # the router's last-ISL gauge keeps its value between requests
        self.params: dict[str, float | str] = {
            "dynamo_source": DYNAMO_SOURCE, "mode": "load", "interval_s": interval_s,
            "learning_window": learning_window, "min_observations": min_observations,
            "scaling_down_sensitivity": scaling_down_sensitivity}

    def tick(self, observation: Observation | NoData, now_s: float) -> Decision:
        if isinstance(observation, NoData):
            return self._hold(now_s, Reason.NO_DATA_HOLD, f"no data ({observation.reason}: {observation.detail})")
        agg = "aggregated" in self.current
        pre = observation.pools.get("aggregated" if agg else "prefill")
        dec = observation.pools.get("aggregated" if agg else "decode")
        if pre is None or dec is None:
            return self._hold(now_s, Reason.NO_DATA_HOLD, f"observation lacks a pool: {sorted(observation.pools)}")
        starting = sorted({p for p, o in zip(self.current, (pre, dec) if not agg else (pre,), strict=True)
                           if (o.ready_replicas or 0) < self.current[p]})
        if starting:
            return self._hold(now_s, Reason.SCALE_UP_STABILIZED, f"{', '.join(starting)} still starting: Dynamo's "
                              "load loop applies with blocking=True and waits for the deployment to be ready")
        detail: dict[str, float | str] = dict(self.params)
        p_want = self._prefill(pre, detail)
        d_want = self._decode(dec, detail)
        if agg:
            return self._combine_aggregated(now_s, p_want, d_want, detail)
        return self._combine(now_s, p_want, d_want, detail)

    def _hold(self, now_s: float, reason: Reason, why: str, detail: Mapping[str, float | str] | None = None) -> Decision:
        d = make_decision(now_s, self.current, self.gpus, reasons={p: (reason,) for p in self.current})
        return replace(d, reasons=(Reason.BASELINE, reason), detail={**(detail or self.params), "hold": why})

    def _prefill(self, o: PoolObservation, detail: dict[str, float | str]) -> int | None:
        n = int(o.ready_replicas or 0)
        if o.isl_mean is not None and o.isl_mean > 0:
            self.last_isl = o.isl_mean
        if n == 0:
            return None
        active = (o.queue + o.running) / n * self.last_isl
        if o.ttft_ms_mean is not None and o.ttft_ms_mean > 0 and self.last_isl > 0:
            self.ttft.add(active + self.last_isl, o.ttft_ms_mean)
        x_sla = self.ttft.x_at(self.policy.sla.ttft_ms)
        if x_sla is None:
            detail["prefill"] = f"TTFT regression warming up ({len(self.ttft.points)}/{self.ttft.min_observations})"
            return None
        target = x_sla - self.last_isl
        detail.update(prefill_active_tokens_per_worker=active, prefill_target_active_tokens=target)
        return step_decision(active, target, n, self.sensitivity)

    def _decode(self, o: PoolObservation, detail: dict[str, float | str]) -> int | None:
        n = int(o.ready_replicas or 0)
        if n == 0 or o.kv_usage is None:
            return None
        active = o.kv_usage * self.kv_capacity_tokens
        if o.itl_ms_mean is not None and o.itl_ms_mean > 0 and active > 0:
            self.itl.add(active, o.itl_ms_mean)
        x_sla = self.itl.x_at(self.policy.sla.itl_ms)
        if x_sla is None:
            detail["decode"] = f"ITL regression warming up ({len(self.itl.points)}/{self.itl.min_observations})"
            return None
        detail.update(decode_active_kv_tokens_per_worker=active, decode_target_kv_tokens=x_sla)
        if x_sla <= 0:
            detail["decode"] = "ITL SLA unreachable by the regression (target <= 0): no decode decision"
            return None
        return step_decision(active, x_sla, n, self.sensitivity)

    def _combine(self, now_s: float, p_want: int | None, d_want: int | None, detail: dict[str, float | str]) -> Decision:
        cur_p, cur_d = self.current["prefill"], self.current["decode"]
        p_up, d_up = p_want is not None and p_want > cur_p, d_want is not None and d_want > cur_d
        p_down, d_down = p_want is not None and p_want < cur_p, d_want is not None and d_want < cur_d
        if p_up or d_up:
            want = {"prefill": p_want if p_want is not None and p_up else cur_p,
                    "decode": d_want if d_want is not None and d_up else cur_d}
        elif p_down and d_down and p_want is not None and d_want is not None:
            want = {"prefill": p_want, "decode": d_want}
        else:
            return self._hold(now_s, Reason.WITHIN_TOLERANCE, "no pool past its threshold (down needs both)", detail)
        floors = {p: self.policy.pool(p).min_replicas for p in ("prefill", "decode")}
        p, d, clamped = dynamo_global_budget(max(want["prefill"], floors["prefill"]),
                                             max(want["decode"], floors["decode"]), self.gpus, floors,
                                             self.policy.budget.max_gpus)
        return self._apply(now_s, {"prefill": p, "decode": d}, {k: float(v) for k, v in want.items()}, floors,
                           clamped, detail)

    def _combine_aggregated(self, now_s: float, p_want: int | None, d_want: int | None,
                            detail: dict[str, float | str]) -> Decision:
        cur = self.current["aggregated"]
        ups = [w for w in (p_want, d_want) if w is not None and w > cur]
        if ups:
            want = max(ups)
        elif p_want is not None and d_want is not None and p_want < cur and d_want < cur:
            want = max(p_want, d_want)
        else:
            return self._hold(now_s, Reason.WITHIN_TOLERANCE, "no threshold crossed (down needs both)", detail)
        floor = self.policy.pool("aggregated").min_replicas
        n, clamped = dynamo_component_budget(max(want, floor), self.gpus["aggregated"], floor,
                                             self.policy.budget.max_gpus)
        return self._apply(now_s, {"aggregated": n}, {"aggregated": float(want)}, {"aggregated": floor}, clamped, detail)

    def _apply(self, now_s: float, targets: dict[str, int], want: Mapping[str, float], floors: Mapping[str, int],
               clamped: bool, detail: dict[str, float | str]) -> Decision:
        reasons = {p: (Reason.SLA_CAPACITY,) + ((Reason.FLOOR,) if want[p] < floors[p] else ())
                   + ((Reason.BUDGET,) if clamped else ()) for p in targets}
        self.current = targets
        d = make_decision(now_s, targets, self.gpus, want, reasons)
        return replace(d, detail=detail)
