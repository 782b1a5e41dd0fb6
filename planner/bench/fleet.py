"""The fleet benchmark (``planner bench fleet``): eight models on one GPU budget, from the shipped traces.

Two large models with the Azure 2023 conversation and code shapes (priority 10), one chat model whose load
jumps fourfold for a stretch and pushes the fleet to its budget (priority 0), and five sparse models, each
busy for 8 minutes of every 30 and idle in between, at phases spread over the half hour (priorities 5 and 0),
asleep (zero replicas) after 3 idle minutes.
Every model runs the example policy as shipped (its name changed), on the shipped Qwen3-32B profile or, for
the code-shaped ones, the suite's code profile (planner/bench/scenarios.py). Traces come from the suite's
traces folder (``scenarios.default_traces_dir()``): each model is a seeded draw of the Azure conv or code
trace at its own rate (``load_requests``' superposed copies), cut to its busy windows or spliced with a
fourfold stretch.

``day``: the same fleet over a whole day. Every model's arrivals follow ServeGen m-large's day 2 (its 10-minute
aggregate rates, the suite's servegen-day), 24 hours after a 10-minute warm-up from the end of day 1, scaled so
the day's busiest window is the hour's rate: each model's hour of Azure requests is drawn again to cover the day
(fresh seeds, one draw per hour) and thinned by the day's rate over its peak, so the requests keep their Azure
lengths and minute-scale burstiness and the fleet's peak needs stay the hour's (the budget too). The sparse
models keep their busy windows (8 minutes of every 30) and the burst its 10 minutes at 4x, past half the day.
Every model promises its percentile over the day (``sla.window_s``: the scored day), as the day is scored.
``compress`` plays the day that many times faster (8: as the suite's servegen-day, a 10-minute window lasting
75 s and the day 3 hours of simulated time; the busy windows and the burst keep their simulated lengths).

The run is ``planner backtest --fleet``'s (sim/evaluate/fleet_backtest.py): the fleet on its budget, the
same planners without a shared budget, and static pools sized at each model's peak load (its busiest 10 minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.bench.scenarios import EXAMPLE_POLICY, analytical, default_traces_dir
from planner.errors import UserError
from planner.fleet_file import Fleet, FleetBudget, FleetMember
from planner.policy_file import load_policy
from planner.profile import Profile, load_profile
from planner.sim.traces.loaders import load_rate_windows, load_requests
from planner.sim.traces.records import RequestTrace

CONV = "azure2023/AzureLLMInferenceTrace_conv.csv"
CODE = "azure2023/AzureLLMInferenceTrace_code.csv"
PERIOD_S, BUSY_S = 1800.0, 480.0  # a sparse model is busy 8 minutes of every 30 (--quick: 160 s of every 600)
QUICK_PERIOD_S = 600.0
# A sparse model's idle window (scale_to_zero_after_s): 3 minutes without a request, then its GPUs go back.
# The example's 600 s is longer than the quick run's idle stretches (440 s): there the models never slept.
# 180 s is over the 120 s start-up a wake costs, and well inside both runs' idle stretches (440 s, 1320 s).
IDLE_S = 180.0
# Scored after a warm-up (as the suite: 600 s, quick 240 s). FULL_S is a bound: the Azure traces end at
# 3,436-3,502 s, so the full run scores their last 48-50 minutes, as the suite's Azure scenarios do.
FULL_S, QUICK_S = 3600.0, 1200.0
WARMUP_S, QUICK_WARMUP_S = 600.0, 240.0
BURST = (0.55, 1 / 6, 4.0)  # the burst: starts past half the trace, lasts a sixth of it, at 4x the base rate
# Sized to bind during the burst: the two priority-10 models peak at 33 GPUs (conv 9 prefill + 2 two-GPU
# decode, code 8 two-GPU prefill + 1 four-GPU decode) and the burst model at 9; with the sparse models awake
# then, the same planners without the budget reach 49 (full run). Floors: 12 GPUs (33 with --no-zero).
BUDGET_GPUS = 44
# --no-zero holds the sparse models' floors (33 GPUs in all): at 44 the priority-10 models would have 11 GPUs
# above their floors for the 24 they want, clamped by lower priorities' floors. At 56 the burst binds there
# (the same planners without the budget reach 61) and the priority-10 models keep their sizes.
NO_ZERO_BUDGET_GPUS = 56


# The day (``day``): ServeGen m-large's aggregate rates, the suite's servegen-day (its day 2).
SERVEGEN = "servegen/aggregate_rate_language_m-large.csv"
# Played as recorded by default (7 minutes a run on 2 cores): a 10-minute window lasts 10 minutes and the static
# pools are sized on 10 real minutes, as in the hour. ``compress`` 8 (as the suite's servegen-day) runs in 40 s
# and makes every rate change 8x steeper: harder for every autoscaler, not for the static pools.
DAY_REAL_S, DAY_COMPRESS = 86400.0, 1.0
HOUR_DRAW_S = 3400.0  # one Azure hour's draw covers this much (the traces end at 3,436-3,502 s)
BURST_S = 600.0  # the day's burst: 10 minutes (of simulated time), as in the hour


def default_budget(zero: bool = True) -> int:
    return BUDGET_GPUS if zero else NO_ZERO_BUDGET_GPUS


@dataclass(frozen=True)
class FleetModel:
    name: str
    priority: int
    trace_file: str
    rate_scale: float
    code: bool = False  # the suite's code profile (prefill at TP2 for 7k-token prompts)
    busy_phase: float | None = None  # sparse: busy from this share of every period, for BUSY_S / PERIOD_S of it
    burst: bool = False


MODELS: tuple[FleetModel, ...] = (
    FleetModel("conv-large", 10, CONV, 4.0),
    FleetModel("code-large", 10, CODE, 3.0, code=True),
    FleetModel("chat-burst", 0, CONV, 1.0, burst=True),
    FleetModel("sparse-a", 5, CONV, 0.5, busy_phase=0),
    FleetModel("sparse-b", 5, CODE, 0.5, code=True, busy_phase=0.2),
    FleetModel("sparse-c", 0, CONV, 0.5, busy_phase=0.4),
    FleetModel("sparse-d", 0, CODE, 0.5, code=True, busy_phase=0.6),
    FleetModel("sparse-e", 0, CONV, 0.5, busy_phase=0.8),
)


def model_trace(m: FleetModel, traces_dir: Path, length_s: float, seed: int, period_s: float = PERIOD_S) -> RequestTrace:
    base = load_requests(traces_dir / m.trace_file, "azure", rate_scale=m.rate_scale, seed=seed, duration_s=length_s)
    if m.busy_phase is not None:
        phase, busy = m.busy_phase * period_s, BUSY_S / PERIOD_S * period_s
        keep = ((base.arrival_s - phase) % period_s) < busy
        return RequestTrace(base.arrival_s[keep], base.isl[keep], base.osl[keep], base.source,
                            f"busy {busy:g} s of every {period_s:g} s from {phase:g} s")
    if m.burst:
        start, span, factor = BURST[0] * length_s, BURST[1] * length_s, BURST[2]
        hot = load_requests(traces_dir / m.trace_file, "azure", rate_scale=m.rate_scale * factor, seed=seed + 1000,
                            duration_s=length_s).window(start, start + span)
        out = (base.window(0.0, start), hot, base.window(start + span, length_s + 1.0))
        return RequestTrace(np.concatenate([t.arrival_s for t in out]), np.concatenate([t.isl for t in out]),
                            np.concatenate([t.osl for t in out]), base.source,
                            f"x{factor:g} over [{start:g}, {start + span:g}) s")
    return base


def day_shape(traces_dir: Path, length_s: float, warmup_s: float, compress: float = DAY_COMPRESS
              ) -> tuple[np.ndarray, np.ndarray]:
    """(window starts in simulated s, rate over the run's peak): ServeGen's day 2 after ``warmup_s`` of day 1's
    end, played ``compress`` x faster, cut to ``length_s`` of simulated time."""
    w = load_rate_windows(traces_dir / SERVEGEN)
    start = DAY_REAL_S - warmup_s * compress
    keep = (w.window_start_s >= start) & (w.window_start_s < start + length_s * compress)
    rate = w.rate_rps[keep]
    return (w.window_start_s[keep] - start) / compress, rate / float(np.max(rate))


def _hour_draw(m: FleetModel, traces_dir: Path, seed: int, offset_s: float, burst_s: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival s, ISL, OSL) of one draw of ``m``'s Azure hour from ``offset_s``; a burst model's
    [burst_s, burst_s + BURST_S) comes from a draw at BURST[2] x its rate instead."""
    base = load_requests(traces_dir / m.trace_file, "azure", rate_scale=m.rate_scale, seed=seed, duration_s=HOUR_DRAW_S)
    at = base.arrival_s + offset_s
    if not m.burst or not offset_s - BURST_S < burst_s < offset_s + HOUR_DRAW_S:
        return at, base.isl, base.osl
    hot = load_requests(traces_dir / m.trace_file, "azure", rate_scale=m.rate_scale * BURST[2], seed=seed + 1000,
                        duration_s=HOUR_DRAW_S)
    hot_at = hot.arrival_s + offset_s
    keep = (at < burst_s) | (at >= burst_s + BURST_S)
    inside = (hot_at >= burst_s) & (hot_at < burst_s + BURST_S)
    return (np.concatenate([at[keep], hot_at[inside]]), np.concatenate([base.isl[keep], hot.isl[inside]]),
            np.concatenate([base.osl[keep], hot.osl[inside]]))


def day_trace(m: FleetModel, traces_dir: Path, length_s: float, warmup_s: float, seed: int,
              period_s: float = PERIOD_S, compress: float = DAY_COMPRESS) -> RequestTrace:
    """``m``'s requests over the day: its Azure hour drawn again for every HOUR_DRAW_S of simulated time (a burst
    model's burst spliced in past half the day), thinned by the day's rate over its peak (``day_shape``), then
    cut to its busy windows."""
    starts, share = day_shape(traces_dir, length_s, warmup_s, compress)
    burst_s = BURST[0] * length_s
    draws = [_hour_draw(m, traces_dir, seed + 7919 * k, k * HOUR_DRAW_S, burst_s)
             for k in range(int(np.ceil(length_s / HOUR_DRAW_S)))]
    at, isl, osl = (np.concatenate([d[i] for d in draws]) for i in range(3))
    window = np.clip(np.searchsorted(starts, at, side="right") - 1, 0, len(starts) - 1)
    keep = (at < length_s) & (np.random.default_rng(seed).random(len(at)) < share[window])
    if m.busy_phase is not None:
        phase, busy = m.busy_phase * period_s, BUSY_S / PERIOD_S * period_s
        keep &= ((at - phase) % period_s) < busy
    order = np.argsort(at[keep], kind="stable")
    note = (f"ServeGen m-large day 2 x{compress:g} faster, its peak at the hour's rate x{m.rate_scale:g}"
            + (f", busy {BUSY_S:g} s of every {period_s:g} s" if m.busy_phase is not None else "")
            + (f", x{BURST[2]:g} over {BURST_S:g} s from {burst_s:g} s" if m.burst else ""))
    return RequestTrace(at[keep][order], isl[keep][order], osl[keep][order], f"{m.trace_file} + {SERVEGEN}", note)


def needed_traces(day: bool) -> tuple[str, ...]:
    """The shipped trace files a fleet run reads (the day's ServeGen rates too)."""
    return (CONV, CODE, SERVEGEN) if day else (CONV, CODE)


def missing_trace(folder: Path, day: bool) -> Path | None:
    """The first trace file a fleet run needs that ``folder`` lacks (None: all there)."""
    return next((folder / n for n in needed_traces(day) if not (folder / n).is_file()), None)


def trace_notes(quick: bool, day: bool, compress: float) -> dict:
    """report.json's ``models`` (what each model's trace is drawn from) and, for a day, ``day``."""
    out: dict = {"models": {m.name: {"trace": m.trace_file, "rate_scale": m.rate_scale,
                                     "sparse": m.busy_phase is not None, "burst": m.burst, "code_profile": m.code}
                            for m in MODELS}}
    if day:
        out["day"] = {"trace": SERVEGEN, "compress": compress, "scored_s": day_length(quick, compress) - fleet_warmup(quick)}
    return out


def fleet_command(quick: bool = False, budget_gpus: int | None = None, seed: int = 0, zero: bool = True,
                  idle_s: float | None = None, wake_first: bool = True, wake_after_s: float | None = None,
                  day: bool = False, compress: float | None = None, policy_path: Path | None = None) -> str:
    """The command line that reproduces a fleet run (report.json's ``command``)."""
    return " ".join(["planner bench fleet", *(["--quick"] if quick else []),
                     *([f"--policy {policy_path}"] if policy_path is not None else []),
                     *([f"--budget-gpus {budget_gpus}"] if budget_gpus else []), f"--seed {seed}",
                     *([] if zero else ["--no-zero"]), *([f"--idle-s {idle_s:g}"] if idle_s is not None else []),
                     *([] if wake_first else ["--no-wake-first"]),
                     *([f"--wake-after-s {wake_after_s:g}"] if wake_after_s is not None else []),
                     *(["--day"] if day else []),
                     *([f"--compress {compress:g}"] if compress is not None else [])])


def fleet_warmup(quick: bool) -> float:
    """The unscored warm-up of every fleet run, the hour's and the day's alike."""
    return QUICK_WARMUP_S if quick else WARMUP_S


def day_length(quick: bool, compress: float = DAY_COMPRESS) -> float:
    """The day's run in simulated s, warm-up included (``quick``: the warm-up and the day's first 20 minutes)."""
    return fleet_warmup(quick) + (QUICK_S if quick else DAY_REAL_S / compress)


def bench_fleet(quick: bool = False, traces_dir: Path | None = None, budget_gpus: int | None = None,
                seed: int = 0, zero: bool = True, idle_s: float = IDLE_S,
                wake_first: bool = True, wake_after_s: float | None = None, day: bool = False,
                compress: float = DAY_COMPRESS, policy_path: Path | None = None
                ) -> tuple[Fleet, dict[str, RequestTrace]]:
    """The fleet and its traces (one per model); ``zero``: the sparse models scale to zero (min_replicas 0,
    after ``idle_s`` without a request) between their busy windows; ``day``: over a whole day (``day_trace``),
    played ``compress`` x faster; ``policy_path``: the policy every model runs (default: the example as shipped;
    its profile for the conv-shaped models, the suite's code profile for the code-shaped ones)."""
    folder = traces_dir or default_traces_dir()
    if folder is None or missing_trace(folder, day) is not None:
        raise UserError(f"traces: {', '.join(needed_traces(day))} are needed under {folder or 'profiles/traces'}; "
                        "pass the folder that holds them", key="traces")
    source = policy_path or EXAMPLE_POLICY
    policy = load_policy(source)
    shipped = load_profile(Path(policy.profile) if Path(policy.profile).is_absolute()
                           else source.parent.parent / policy.profile)
    code: Profile | None = None
    members = []
    length = (QUICK_S + QUICK_WARMUP_S) if quick else (FULL_S + WARMUP_S)
    scored_s = day_length(quick, compress) - fleet_warmup(quick)
    traces = {}
    for i, m in enumerate(MODELS):
        if m.code and code is None:
            code = analytical("qwen3-32b", policy, isl=7437, osl=28, grid=None)
        profile = code if m.code and code is not None else shipped
        own = policy.model_copy(update={"name": m.name})
        if day:  # the percentile is promised over the day, as the day is scored (the hour's window: its own)
            own = own.model_copy(update={"sla": own.sla.model_copy(update={"window_s": scored_s})})
        if m.busy_phase is not None and zero:  # sparse models sleep between their busy windows
            own = type(policy).model_validate({**own.model_dump(by_alias=True), "scale_to_zero_after_s": idle_s,
                                               "pools": {p: {**own.pool(p).model_dump(by_alias=True), "min_replicas": 0}
                                                         for p in own.pool_names()}})
        members.append(FleetMember(own, profile, m.priority, source))
        period = QUICK_PERIOD_S if quick else PERIOD_S
        traces[m.name] = (day_trace(m, folder, day_length(quick, compress), fleet_warmup(quick), seed + i, period,
                                    compress) if day else model_trace(m, folder, length, seed + i, period))
    floors = sum(mem.floor_gpus for mem in members)
    budget_gpus = default_budget(zero) if budget_gpus is None else budget_gpus
    if budget_gpus < floors:
        raise UserError(f"budget_gpus: {budget_gpus} is below the models' floors ({floors} GPUs)", key="budget_gpus")
    budget = FleetBudget(max_gpus=budget_gpus, gpu_cost_per_hour={"h200": 3.5}, wake_first=wake_first,
                         **({} if wake_after_s is None else {"wake_after_s": wake_after_s}))
    return Fleet("bench fleet", budget,
                 tuple(members)), traces
