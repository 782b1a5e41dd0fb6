"""Backtest: replay one trace under the planner and the baselines, and summarise each (report contract).

Per request: met-TTFT = TTFT <= sla.ttft_ms; met-ITL = the request's *mean* inter-token latency
(time from first to last token / (OSL - 1)) <= sla.itl_ms (requests with OSL 1 meet it trivially);
failed requests (killed, or unfinished ``tail_s`` after the last arrival) miss both. Attainment is the
fraction of requests; the SLA is met when attainment >= sla.percentile / 100.

Every policy starts from the same warm, ready cluster (the oracle's sizes for the first
``startup_s + interval``, or a fluid estimate when the oracle is not run), so no policy is charged for a
cold start the others do not pay. A warm-up (``warmup_s``) goes further: every policy runs the trace's first
``warmup_s`` seconds unscored, so the scored window starts from each policy's own state and history rather
than from one arbitrary starting size that suits some policies' first minutes better than others'.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.config import Policy
from planner.errors import UserError
from planner.perf.kv import gbps_to_bytes_per_s
from planner.profile import Profile
from planner.sim.baselines import DynamoSLAController, ReactiveController, StandInPlanner, StaticController
from planner.sim.cluster import SimConfig
from planner.sim.oracle import OracleController, OracleSchedule, compute_oracle
from planner.sim.replay import Replay, replay
from planner.sim.traces import RequestTrace
from planner.types import Controller

BASELINES = ("static", "reactive", "dynamo-sla", "oracle", "clairvoyant")
MET_ITL = "request mean ITL ((last token - first token) / (OSL - 1)) <= sla.itl_ms"


@dataclass(frozen=True)
class BacktestResult:
    report: dict
    replays: dict[str, Replay]
    trace: RequestTrace


def check_trace(trace: RequestTrace, profile: Profile, config: SimConfig) -> None:
    """Every request must fit the model's context and one decode replica's KV cache."""
    if len(trace) == 0:
        raise UserError(f"{trace.source}: the trace has no requests")
    limit = profile.model.max_context_tokens
    kv_cap = profile.decode_curve(config.decode_tp or profile.selected_tp("decode")).kv_capacity_tokens
    total = trace.isl + trace.osl
    bad = np.nonzero(total > min(limit, kv_cap))[0]
    if len(bad):
        i = int(bad[0])
        raise UserError(f"{trace.source}: request #{i} (arrival {trace.arrival_s[i]:.3f} s) has ISL {trace.isl[i]} + "
                        f"OSL {trace.osl[i]} = {total[i]} tokens, more than the profile allows "
                        f"(max context {limit}, KV capacity {kv_cap}); {len(bad)} such requests")


def planner_controller(policy: Policy, profile: Profile, initial: dict[str, int],
                       forecaster: str | None) -> tuple[Controller, bool]:
    """The policy under test: the decision core when present, else the documented stand-in."""
    try:
        from planner.decide.controller import make_planner_controller  # type: ignore[import-not-found]
    except ImportError:
        return StandInPlanner(policy, profile, initial), True
    ctl = make_planner_controller(policy, profile, forecaster)
    _seed_current(ctl, initial)
    return ctl, False


def _seed_current(ctl: object, initial: dict[str, int]) -> None:
    """Tell the planner what is running, as the live loop does from the actuator before its first tick.

    Without it a NoData hold in the first window would "hold" the floors and tear the warm cluster down.
    """
    try:
        from planner.decide.state import PlannerState, PoolMemory
    except ImportError:
        return
    state = getattr(ctl, "state", None)
    if isinstance(state, PlannerState) and not state.pools:
        ctl.state = PlannerState(pools={p: PoolMemory(target=n) for p, n in initial.items()})  # type: ignore[attr-defined]


def fluid_initial(trace: RequestTrace, profile: Profile, policy: Policy, horizon_s: float) -> dict[str, int]:
    head = trace.window(0.0, max(horizon_s, 60.0))
    if len(head) == 0:
        return {p: policy.pool(p).min_replicas for p in policy.pool_names()}
    span = max(horizon_s, 60.0)
    ctl = StandInPlanner(policy, profile, {p: 1 for p in policy.pool_names()})
    rate = len(head) / span
    pc, dc = ctl.pc, ctl.dc
    isl, osl = float(head.isl.mean()), float(head.osl.mean())
    batch = max(1, dc.max_batch_meeting(policy.sla.itl_ms, isl + osl / 2))
    p = rate * isl / (pc.tokens_per_s_per_gpu(isl) * pc.gpus) / 0.7
    d = rate * osl / (dc.tokens_per_s_per_gpu(batch, isl + osl / 2) * dc.gpus) / 0.7
    need = {"prefill": p, "decode": d} if policy.mode != "aggregated" else {"aggregated": p + d}
    return {k: min(policy.pool(k).max_replicas, max(policy.pool(k).min_replicas, math.ceil(v)))
            for k, v in need.items()}


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return {"p50": None, "p95": None, "p99": None}
    p = np.percentile(v, [50, 95, 99])
    return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "p99": round(float(p[2]), 3)}


def direction_changes(targets: Sequence[tuple[float, dict[str, int]]]) -> int:
    """Per pool, how often the sign of consecutive non-zero replica changes flips (up->down, down->up)."""
    flips = 0
    # Union of keys: a first tick that holds with unknown sizes (no data yet) carries no pools at all.
    pools = sorted({pool for _, tg in targets for pool in tg})
    for pool in pools:
        last_sign = 0
        prev = None
        for _, tg in targets:
            n = tg.get(pool)
            if n is None:
                continue
            if prev is not None and n != prev:
                sign = 1 if n > prev else -1
                if last_sign and sign != last_sign:
                    flips += 1
                last_sign = sign
            prev = n
    return flips


def summarise(rep: Replay, policy: Policy, duration_s: float) -> dict:
    """Scores of one replay; with a warm-up (``rep.score_from_s``), only what arrived and ran after it."""
    scored = rep.results["arrival_s"] >= rep.score_from_s
    r = {k: v[scored] for k, v in rep.results.items()}
    failed = r["failed"]
    ok = ~failed
    with np.errstate(invalid="ignore"):
        ttft_ms = np.where(ok, r["ttft_s"] * 1e3, np.nan)
        itl_ms = np.where(ok, r["itl_mean_s"] * 1e3, np.nan)
        met_ttft = ok & (ttft_ms <= policy.sla.ttft_ms)
        met_itl = ok & (itl_ms <= policy.sla.itl_ms)
    n = len(failed)
    hours = max(duration_s - rep.score_from_s, 1.0) / 3600.0
    targets = [(t, tg) for t, tg in rep.targets if t >= rep.score_from_s]
    peak: dict[str, int] = {}
    for _, tg in targets:
        for p, v in tg.items():
            peak[p] = max(peak.get(p, 0), v)
    if rep.score_from_s > 0:
        before = [tg for t, tg in rep.targets if t < rep.score_from_s][-1:]  # the targets scoring starts from
        seq = before + [tg for _, tg in targets]
        events = sum(1 for a, b in zip(seq, seq[1:], strict=False) if a != b)
    else:
        events = int(rep.scale_events)
    return {
        "requests": int(n),
        "attainment_ttft": round(float(met_ttft.mean()), 5) if n else None,
        "attainment_itl": round(float(met_itl.mean()), 5) if n else None,
        "attainment_joint": round(float((met_ttft & met_itl).mean()), 5) if n else None,
        "ttft_ms": _pcts(ttft_ms),
        "itl_ms": _pcts(itl_ms),
        "itl_max_gap_ms": _pcts(np.where(ok, r["itl_max_s"] * 1e3, np.nan)),
        "e2e_ms": _pcts(np.where(ok, r["e2e_s"] * 1e3, np.nan)),
        "gpu_hours": round(rep.gpu_hours, 4),
        "scale_events": events,
        "direction_changes_per_hour": round(direction_changes(targets) / hours, 3),
        "failed_requests": int(failed.sum()),
        "peak_replicas": peak,
    }


def run_backtest(trace: RequestTrace, profile: Profile, policy: Policy, *, baselines: Sequence[str] = BASELINES,
                 startup_s: float | None = None, kill: bool = False, seed: int = 0, forecaster: str | None = None,
                 oracle_interval_s: float | None = None, workers: int | None = None,
                 progress: Callable[[str, float, float], None] | None = None,
                 trace_meta: dict | None = None, dynamo_predictor: str = "constant",
                 warmup_s: float = 0.0) -> BacktestResult:
    """Replay ``trace`` under the planner and ``baselines``; with ``warmup_s`` > 0 the trace's first ``warmup_s``
    seconds run every policy into its own steady state (and give forecasters history) but are not scored."""
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise UserError(f"--baselines: unknown {', '.join(unknown)}; allowed: {', '.join(BASELINES)}")
    startup = float(policy.startup_s if startup_s is None else startup_s)
    if not math.isfinite(startup) or startup < 0:
        raise UserError(f"--startup-s: {startup!r} must be >= 0")
    config = SimConfig(mode=policy.mode, link_bytes_per_s=gbps_to_bytes_per_s(policy.kv_link.gbps), startup_s=startup,
                       kill=kill)
    check_trace(trace, profile, config)
    duration = trace.duration_s
    if not math.isfinite(warmup_s) or not 0 <= warmup_s < duration:
        raise UserError(f"--warmup-s: {warmup_s!r} must be >= 0 and shorter than the trace ({duration:.0f} s)")
    timings: dict[str, float] = {}
    schedule: OracleSchedule | None = None
    if "oracle" in baselines or "static" in baselines:
        t0 = time.perf_counter()
        o_int = float(oracle_interval_s or max(60.0, policy.interval_s))
        schedule = compute_oracle(trace, profile, policy, config, interval_s=o_int, workers=workers,
                                  progress=(lambda d, n: progress("oracle search", d, n)) if progress else None)
        timings["oracle_search"] = round(time.perf_counter() - t0, 2)
    if schedule is not None:
        floors = {p: policy.pool(p).min_replicas for p in policy.pool_names()}
        initial = schedule.need_over(0.0, startup + policy.interval_s, floors)
    else:
        initial = fluid_initial(trace, profile, policy, startup + policy.interval_s)
    ctl, stand_in = planner_controller(policy, profile, initial, forecaster)
    controllers: list[tuple[Controller, float]] = [(ctl, policy.metrics.window_s)]
    for b in baselines:
        if b == "static":
            assert schedule is not None
            controllers.append((StaticController(policy, profile, schedule.peak(warmup_s)), policy.metrics.window_s))
        elif b == "reactive":
            controllers.append((ReactiveController(policy, profile, initial), policy.metrics.window_s))
        elif b == "dynamo-sla":
            dyn = DynamoSLAController(policy, profile, initial, predictor=dynamo_predictor)
            controllers.append((dyn, dyn.interval_s))
        elif b == "clairvoyant":
            from planner.sim.clairvoyant import ClairvoyantPlanner

            cv = ClairvoyantPlanner(policy, profile, trace, policy.metrics.window_s)
            _seed_current(cv, initial)
            controllers.append((cv, policy.metrics.window_s))
        elif b == "oracle":
            assert schedule is not None
            controllers.append((OracleController(policy, profile, schedule, startup), policy.metrics.window_s))
    policies: dict[str, dict] = {}
    replays: dict[str, Replay] = {}
    for c, window in controllers:
        t0 = time.perf_counter()
        init = dict(initial)
        if isinstance(c, StaticController):
            init = dict(c.targets)
        cb = (lambda t, name=c.name: progress(name, t, duration)) if progress else None
        rep = replay(trace, profile, c, config, init, window_s=window, progress=cb, score_from_s=warmup_s)
        replays[c.name] = rep
        s = summarise(rep, policy, duration)
        s["interval_s"] = float(c.interval_s)
        s["runtime_s"] = round(time.perf_counter() - t0, 2)
        if c.name == "planner":
            s["stand_in"] = stand_in
        policies[c.name] = s
    report = {
        "trace": {**trace.summary(), **(trace_meta or {}), "warmup_s": warmup_s,
                  "scored_requests": int(np.count_nonzero(trace.arrival_s >= warmup_s))},
        "sla": {"ttft_ms": policy.sla.ttft_ms, "itl_ms": policy.sla.itl_ms, "percentile": policy.sla.percentile,
                "met_ttft": "TTFT <= sla.ttft_ms", "met_itl": MET_ITL},
        "sim": {"mode": policy.mode, "startup_s": startup, "kill": kill, "seed": seed,
                "kv_link_gbps": policy.kv_link.gbps, "profile_model": profile.model.name,
                "prefill_tp": profile.selected_tp("prefill"), "decode_tp": profile.selected_tp("decode"),
                "initial_replicas": initial, "chunk_tokens": config.chunk_tokens, "warmup_s": warmup_s,
                "forecast": {"model": forecaster or policy.forecast.model, "quantile": policy.forecast.quantile},
                "dynamo_predictor": dynamo_predictor,
                "planner": "stand-in (planner.sim.baselines.StandInPlanner)" if stand_in
                else "planner.decide.controller.make_planner_controller"},
        "policies": policies,
        "timings_s": timings,
    }
    if schedule is not None:
        report["oracle"] = {"method": schedule.method, "interval_s": schedule.interval_s,
                            "simulations": schedule.simulations, "simulated_requests": schedule.simulated_requests,
                            "infeasible_intervals": schedule.infeasible_intervals,
                            "peak": schedule.peak(warmup_s)}
    return BacktestResult(report, replays, trace)
