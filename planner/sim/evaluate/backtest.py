"""Backtest: replay one trace under the planner and the baselines, and summarise each (report contract).

Per request: met-TTFT = TTFT <= sla.ttft_ms; met-ITL = the request's *mean* inter-token latency
(time from first to last token / (OSL - 1)) <= sla.itl_ms (requests with OSL 1 meet it trivially);
failed requests (killed, or unfinished ``tail_s`` after the last arrival) miss both. Attainment is the
fraction of requests; the SLA is met when attainment >= sla.percentile / 100.

Every policy starts from the same warm, ready cluster (a fluid estimate of the first ``startup_s +
interval``), so no policy is charged for a cold start the others do not pay. A warm-up (``warmup_s``) goes
further: every policy runs the trace's first ``warmup_s`` seconds unscored, so the scored window starts from
each policy's own state and history rather than from one arbitrary starting size.

Every report carries two references beside the policies: a strict lower bound (planner/sim/evaluate/lower_bound.py:
no policy, causal or clairvoyant, can meet the SLA for less) and the offline schedule (planner/sim/evaluate/offline.py:
an achievable schedule that knows the future, seeded from every policy of the run and trimmed by full
simulation). The report checks lower bound <= offline schedule and flags any policy that spends less than
the offline schedule and attains at least as much: either is a broken yardstick.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from planner.controller import initial_state, make_planner_controller
from planner.errors import UserError
from planner.perf.kv import gbps_to_bytes_per_s
from planner.policy_file import PolicyFile
from planner.profile import Profile
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.baselines.registry import REFERENCE_ALIASES, REGISTRY, BaselineContext
from planner.sim.evaluate.clairvoyant import FREE_NAME, clairvoyant_planner, with_free_scale_down
from planner.sim.evaluate.lower_bound import LowerBound, lower_bound
from planner.sim.evaluate.offline import OfflineJob, OfflineSchedule, offline_schedule, plan_from_targets
from planner.sim.evaluate.replay import Replay, replay
from planner.sim.evaluate.scoring import MET_ITL, direction_changes, summarise  # noqa: F401 - re-exported
from planner.sim.traces.records import RequestTrace
from planner.types import Controller, Mode, Pool

BASELINES = tuple(REGISTRY)
ACCEPTED = (*BASELINES, *REFERENCE_ALIASES)
OFFLINE_SIMULATIONS = 24  # full simulations the offline search may spend


OFFLINE_REPLAY = "offline"  # the offline schedule's replay in BacktestResult.replays


@dataclass(frozen=True)
class BacktestResult:
    report: dict
    replays: dict[str, Replay]
    trace: RequestTrace
    # What the run was built from (the offline schedule included), so a sweep can replay more policies alike.
    context: BaselineContext | None = None
    config: SimConfig | None = None


def _token_caps(profile: Profile, decode_tp: int | None) -> tuple[int, int]:
    """(the model's context, one decode replica's KV capacity), in tokens."""
    kv_cap = profile.decode_curve(decode_tp or profile.selected_tp("decode")).kv_capacity_tokens
    return int(profile.model.max_context_tokens), int(kv_cap)


def request_token_limit(profile: Profile, decode_tp: int | None = None) -> int:
    """The most tokens (prompt + output) one request may hold: the model's context and one decode replica's KV."""
    return min(_token_caps(profile, decode_tp))


def check_trace(trace: RequestTrace, profile: Profile, config: SimConfig, hint: str = "") -> None:
    """Every request must fit the model's context and one decode replica's KV cache (``hint``: what the caller
    offers instead, appended to the error)."""
    if len(trace) == 0:
        raise UserError(f"{trace.source}: the trace has no requests")
    limit, kv_cap = _token_caps(profile, config.decode_tp)
    total = trace.isl + trace.osl
    bad = np.nonzero(total > min(limit, kv_cap))[0]
    if len(bad):
        i = int(bad[0])
        raise UserError(f"{trace.source}: request #{i} (arrival {trace.arrival_s[i]:.3f} s) has ISL {trace.isl[i]} + "
                        f"OSL {trace.osl[i]} = {total[i]} tokens, more than the profile allows "
                        f"(max context {limit}, KV capacity {kv_cap}); {_requests(len(bad))} in all{hint}")


def _requests(n: int) -> str:
    return "1 such request" if n == 1 else f"{n:,} such requests"


def fluid_initial(trace: RequestTrace, profile: Profile, policy: PolicyFile, horizon_s: float) -> dict[str, int]:
    head = trace.window(0.0, max(horizon_s, 60.0))
    if len(head) == 0:
        return {p: policy.pool(p).min_replicas for p in policy.pool_names()}
    span = max(horizon_s, 60.0)
    rate = len(head) / span
    pc = profile.prefill_curve(profile.selected_tp("prefill"))
    dc = profile.decode_curve(profile.selected_tp("decode"))
    isl, osl = float(head.isl.mean()), float(head.osl.mean())
    batch = max(1, dc.max_batch_meeting(policy.sla.itl_ms, isl + osl / 2))
    p = rate * isl / (pc.tokens_per_s_per_gpu(isl) * pc.gpus) / 0.7
    d = rate * osl / (dc.tokens_per_s_per_gpu(batch, isl + osl / 2) * dc.gpus) / 0.7
    need = {Pool.PREFILL: p, Pool.DECODE: d} if policy.mode is Mode.DISAGGREGATED else {Pool.AGGREGATED: p + d}
    return {k: min(policy.pool(k).max_replicas, max(policy.pool(k).min_replicas, math.ceil(v)))
            for k, v in need.items()}


def run_backtest(trace: RequestTrace, profile: Profile, policy: PolicyFile, *, baselines: Sequence[str] = BASELINES,
                 startup_s: float | None = None, kill: bool = False, seed: int = 0, forecaster: str | None = None,
                 progress: Callable[[str, float, float], None] | None = None,
                 trace_meta: dict | None = None, dynamo_predictor: str = "constant",
                 warmup_s: float = 0.0, offline_simulations: int = OFFLINE_SIMULATIONS,
                 workers: int = 1, seed_quantiles: Sequence[float] = (), yesterday: RequestTrace | None = None,
                 peak_window_s: float = 600.0) -> BacktestResult:
    """Replay ``trace`` under the planner and ``baselines``, with the lower bound and the offline schedule as
    references; with ``warmup_s`` > 0 the trace's first ``warmup_s`` seconds run every policy into its own
    steady state (and give forecasters history) but are not scored. ``seed_quantiles``: the planner at these
    forecast quantiles too, as extra seeds of the offline search only (not reported): a frontier sweep asks
    for its cheaper points, so that none of them beats the yardstick by a seed the search never saw."""
    unknown = [b for b in baselines if b not in ACCEPTED]
    if unknown:
        raise UserError(f"baselines: unknown {', '.join(unknown)}; allowed: {', '.join(ACCEPTED)}", key="baselines")
    if "static-yesterday" in baselines and yesterday is None:
        raise UserError("yesterday: static-yesterday needs the previous day's trace", key="yesterday")
    ctx, config = sim_setup(trace, profile, policy, startup_s=startup_s, kill=kill, warmup_s=warmup_s,
                            dynamo_predictor=dynamo_predictor)
    ctx = replace(ctx, yesterday=yesterday, peak_window_s=peak_window_s)
    startup = ctx.startup_s
    timings: dict[str, float] = {}
    chosen = [b for b in dict.fromkeys(baselines) if b in REGISTRY]
    runs = _runs(ctx, [b for b in chosen if not REGISTRY[b].needs_schedule], forecaster)
    policies, replays = _replay_all(runs, ctx, config, progress)
    t0 = time.perf_counter()
    bound = lower_bound(trace, profile, policy, startup_s=startup, warmup_s=warmup_s, config=config)
    timings["lower_bound"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    seed_groups = [{f"planner quantile {q:g}": planner_run(ctx, forecaster, with_quantile(policy, q))
                    for q in seed_quantiles}, {FREE_NAME: free_clairvoyant_run(ctx)}]
    seed_replays = {name: score_run(run, ctx, config)[1] for group in seed_groups for name, run in group.items()}
    offline = offline_search(ctx, config, {**replays, **seed_replays}, runs, offline_simulations, progress, workers,
                       seed_groups)
    timings["offline_search"] = round(time.perf_counter() - t0, 2)
    ctx = replace(ctx, schedule=offline)
    more, more_replays = schedule_baselines(ctx, config, chosen, progress)
    policies.update(more)
    replays.update(more_replays)
    report = {
        "trace": {**trace.summary(), **(trace_meta or {}), "warmup_s": warmup_s,
                  "scored_requests": int(np.count_nonzero(trace.arrival_s >= warmup_s))},
        "sla": {"ttft_ms": policy.sla.ttft_ms, "itl_ms": policy.sla.itl_ms, "percentile": policy.sla.percentile,
                "met_ttft": "TTFT <= sla.ttft_ms", "met_itl": MET_ITL},
        "sim": _sim_section(ctx, config, kill, seed, forecaster),
        "policies": policies,
        "references": _references(bound, offline, policy, trace.duration_s),
        "timings_s": timings,
    }
    report["checks"] = yardstick_checks(report)
    replays[OFFLINE_REPLAY] = offline.replay
    return BacktestResult(report, replays, trace, ctx, config)


def schedule_baselines(ctx: BaselineContext, config: SimConfig, chosen: Sequence[str],
                       progress: Callable[[str, float, float], None] | None = None
                       ) -> tuple[dict[str, dict], dict[str, Replay]]:
    """The baselines of ``chosen`` built from ``ctx.schedule`` (static holds its peak), replayed."""
    late = [(REGISTRY[b].build(ctx), b) for b in chosen if REGISTRY[b].needs_schedule]
    late_runs = [(c, REGISTRY[b].window_s(c, ctx), REGISTRY[b].starting_replicas(c, ctx)) for c, b in late]
    return _replay_all(late_runs, ctx, config, progress)


def sim_setup(trace: RequestTrace, profile: Profile, policy: PolicyFile, *, startup_s: float | None = None,
              kill: bool = False, warmup_s: float = 0.0, dynamo_predictor: str = "constant"
              ) -> tuple[BaselineContext, SimConfig]:
    """The checked trace's simulation settings and what every policy starts from (no schedule yet)."""
    startup = float(policy.startup_s if startup_s is None else startup_s)
    if not math.isfinite(startup) or startup < 0:
        raise UserError(f"startup_s: {startup!r} must be >= 0", key="startup_s")
    config = SimConfig(mode=policy.mode, link_bytes_per_s=gbps_to_bytes_per_s(policy.kv_link.gbps), startup_s=startup,
                       kill=kill, sla_percentile=policy.sla.percentile, sla_ttft_ms=policy.sla.ttft_ms,
                       sla_itl_ms=policy.sla.itl_ms)
    check_trace(trace, profile, config)
    if trace.duration_s <= 0:
        raise UserError(f"trace: {trace.source or 'the trace'}: {len(trace)} request(s) spanning 0 s: too short "
                        "to replay; it needs requests spread over time", key="trace")
    if not math.isfinite(warmup_s) or not 0 <= warmup_s < trace.duration_s:
        raise UserError(f"warmup_s: {warmup_s!r} must be >= 0 and shorter than the trace ({trace.duration_s:.0f} s)",
                        key="warmup_s")
    initial = fluid_initial(trace, profile, policy, startup + policy.interval_s)
    return BaselineContext(policy, profile, trace, initial, None, warmup_s, startup, dynamo_predictor), config


def offline_search(ctx: BaselineContext, config: SimConfig, replays: dict[str, Replay], runs: list[Run],
             max_simulations: int, progress: Callable[[str, float, float], None] | None,
             workers: int, seed_groups: Sequence[Mapping[str, Run]] = ()) -> OfflineSchedule:
    """The offline schedule, seeded from what every policy of the run asked for, and from each of
    ``seed_groups`` (extra runs by name, not reported; their replays are in ``replays`` too).

    Each group of extra seeds gets a search of its own and the cheapest result is kept: the greedy trim ends
    where its start leads, so in one shared search a cheap seed near the target can win the start and leave
    the yardstick costlier than the usual start would (README, "Simulator and backtests", Frontiers)."""
    extra = {name: run for group in seed_groups for name, run in group.items()}
    named = [(run[0].name, run) for run in runs] + list(extra.items())
    intervals = [int(round(c.interval_s)) for _, (c, _, _) in named]
    exact = all(abs(c.interval_s - round(c.interval_s)) < 1e-9 and c.interval_s >= 1 for _, (c, _, _) in named)
    grid_s = float(math.gcd(*intervals)) if exact else float(ctx.policy.interval_s)
    end_s = max(r.end_s for r in replays.values()) + config.tail_s
    cells = int(math.ceil(end_s / grid_s)) + 1
    seeds = {n: plan_from_targets(replays[n].targets, init, grid_s, cells) for n, (_, _, init) in named}
    job = OfflineJob(ctx.trace, ctx.profile, ctx.policy, config, ctx.window_s, ctx.warmup_s)
    groups = [g for g in ({n: p for n, p in seeds.items() if n not in extra},
                          *({n: seeds[n] for n in group} for group in seed_groups)) if g]
    total = max_simulations * len(groups)
    found: list[OfflineSchedule] = []
    for group in groups:
        done = sum(f.simulations for f in found)
        cb = (lambda what, n, done=done: progress("offline schedule", done + n, total)) if progress else None
        found.append(offline_schedule(job, group, max_simulations, cb, workers))
    if progress:  # the search stops when no cut is left, often under its budget of simulations: done is 100 %
        progress("offline schedule", total, total)
    best = min(found, key=lambda o: (o.attainment < o.target, o.gpu_hours))
    return replace(best, simulations=sum(f.simulations for f in found))


def _references(bound: LowerBound, offline: OfflineSchedule, policy: PolicyFile, duration_s: float) -> dict:
    return {"lower_bound": bound.to_report(), "offline": offline_reference(offline, policy, duration_s)}


def offline_reference(offline: OfflineSchedule, policy: PolicyFile, duration_s: float) -> dict:
    """The report's ``references.offline``: the fields of a policy, and how the schedule was found."""
    scores = summarise(offline.replay, policy, duration_s)
    return {**scores, "method": offline.method, "simulations": offline.simulations,
            "seeded_from": offline.seeded_from, "grid_s": offline.plan.grid_s,
            "target_attainment": round(offline.target, 5),
            "percentile_reachable": offline.reachable >= policy.sla.percentile / 100.0,
            "reachable_attainment": round(offline.reachable, 5),
            "peak_over_window": offline.peak(offline.replay.score_from_s)}


def dominates(point: Mapping, reference: Mapping) -> bool:
    """``point`` is no worse than ``reference`` on both axes (GPU-hours, joint attainment) and better on one.
    GPU-hours are compared to 1e-6 h, so a policy that spends the same and attains more counts."""
    gpu, ref_gpu = point["gpu_hours"], reference["gpu_hours"]
    att, ref_att = point["attainment_joint"] or 0.0, reference["attainment_joint"] or 0.0
    no_worse = gpu <= ref_gpu + 1e-6 and att >= ref_att
    return no_worse and (gpu < ref_gpu - 1e-6 or att > ref_att)


def yardstick_checks(report: dict) -> dict:
    """lower bound <= offline schedule, and no policy that dominates the offline schedule (spends no more
    and attains no less, one of them strictly): a yardstick another policy beats on both axes is broken."""
    ref = report["references"]
    off = ref["offline"]
    dominating = [name for name, p in report["policies"].items() if dominates(p, off)]
    return {"lower_bound_le_offline": ref["lower_bound"]["gpu_hours"] <= off["gpu_hours"] + 1e-9,
            "policies_dominating_offline": dominating}
# (controller, its metrics window, the replicas its replay starts from)
Run = tuple[Controller, float, dict[str, int]]


def _runs(ctx: BaselineContext, baselines: Sequence[str], forecaster: str | None) -> list[Run]:
    """The planner first, then each baseline in the order asked for."""
    runs: list[Run] = [planner_run(ctx, forecaster)]
    for name in baselines:
        entry = REGISTRY[name]
        controller = entry.build(ctx)
        runs.append((controller, entry.window_s(controller, ctx), entry.starting_replicas(controller, ctx)))
    return runs


def _replay_all(runs: list[Run], ctx: BaselineContext, config: SimConfig,
                progress: Callable[[str, float, float], None] | None) -> tuple[dict[str, dict], dict[str, Replay]]:
    policies: dict[str, dict] = {}
    replays: dict[str, Replay] = {}
    for run in runs:
        name = run[0].name
        policies[name], replays[name] = score_run(run, ctx, config, progress)
    return policies, replays


def with_quantile(policy: PolicyFile, quantile: float) -> PolicyFile:
    """``policy`` with its forecast quantile set to ``quantile`` (the planner's headroom knob). With the error
    budget spent (``sla.budget_control``) the lean quantile moves with it, the same distance below (never under
    0.5): a knob that moved only the conservative quantile would leave the lean one capping every point's
    attainment while the budget is healthy (0.85 and 0.75 as shipped: 0.95 sizes at 0.85 while healthy)."""
    update: dict = {"forecast": policy.forecast.model_copy(update={"quantile": quantile})}
    if policy.sla.budget_control:
        gap = policy.forecast.quantile - policy.sla.lean_quantile
        update["sla"] = policy.sla.model_copy(update={"lean_quantile": max(0.5, quantile - gap)})
    return policy.model_copy(update=update)


def free_clairvoyant_run(ctx: BaselineContext) -> Run:
    """The planner fed the true future load, its scale-down unrestricted (a seed of the offline search)."""
    planner = clairvoyant_planner(with_free_scale_down(ctx.policy), ctx.profile, ctx.trace, ctx.window_s,
                                  initial_state(ctx.initial), name=FREE_NAME)
    return planner, ctx.window_s, dict(ctx.initial)


def planner_run(ctx: BaselineContext, forecaster: str | None, policy: PolicyFile | None = None) -> Run:
    """The planner under ``policy`` (default: the run's), starting where every policy starts."""
    planner = make_planner_controller(policy or ctx.policy, ctx.profile, forecaster, ctx.initial)
    return planner, ctx.window_s, dict(ctx.initial)


def score_run(run: Run, ctx: BaselineContext, config: SimConfig,
              progress: Callable[[str, float, float], None] | None = None) -> tuple[dict, Replay]:
    """Replay one controller and score it (a report's policy entry; ``params`` when the controller has them)."""
    c, window, init = run
    t0 = time.perf_counter()
    duration = ctx.trace.duration_s
    cb = (lambda t, name=c.name: progress(name, t, duration)) if progress else None
    rep = replay(ctx.trace, ctx.profile, c, config, init, window_s=window, progress=cb, score_from_s=ctx.warmup_s)
    s = summarise(rep, ctx.policy, duration)
    s["interval_s"] = float(c.interval_s)
    s["runtime_s"] = round(time.perf_counter() - t0, 2)
    params = getattr(c, "params", None)
    if params:
        s["params"] = dict(params)
    return s, rep


def _sim_section(ctx: BaselineContext, config: SimConfig, kill: bool, seed: int, forecaster: str | None) -> dict:
    policy, profile = ctx.policy, ctx.profile
    return {"mode": policy.mode, "startup_s": ctx.startup_s, "kill": kill, "seed": seed,
            "kv_link_gbps": policy.kv_link.gbps, "profile_model": profile.model.name,
            "prefill_tp": profile.selected_tp("prefill"), "decode_tp": profile.selected_tp("decode"),
            "initial_replicas": ctx.initial, "chunk_tokens": config.chunk_tokens, "warmup_s": ctx.warmup_s,
            "forecast": {"model": forecaster or policy.forecast.model, "quantile": policy.forecast.quantile},
            "dynamo_predictor": ctx.dynamo_predictor, "planner": "planner.controller.make_planner_controller"}
