"""Replay a trace through the simulated cluster under one controller (the harness loop).

Every ``controller.interval_s`` the loop reads the sim's MetricSource over the policy's metrics window,
asks the controller for a Decision and applies its targets through the sim's Actuator: exactly what the
live control loop does against Prometheus and Kubernetes. Every ``sample_s`` it records a timeline row
(replicas by state, GPUs, queue, KV usage, windowed TTFT/ITL percentiles, and the latency the decision in
force predicted for its sizes beside the one realised, and, for a controller with the sizing model, what that
model predicts for the ready replicas at the window's own load) for the report's plots and the model's bias. A policy
at zero replicas is woken by its first request at once, as the router's wake signal does live (`planner route
--wake-url`): the controller ticks at that moment, off its grid, which goes on where it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from planner.decide.spec import DeciderSpec
from planner.profile import Profile
from planner.router.defaults import WAKE_REPEAT_S
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.cluster.metrics import SimActuator, SimMetricSource
from planner.sim.evaluate.model_bias import predicted_at_load, window_load
from planner.sim.traces.records import RequestTrace
from planner.types import Controller, Decision, NoData, NoDataReason


@dataclass(frozen=True)
class Replay:
    name: str
    results: dict[str, np.ndarray]  # per request (see Cluster.results)
    timeline: list[dict[str, float]]
    gpu_hours: float
    end_s: float
    scale_events: int
    targets: list[tuple[float, dict[str, int]]]  # (time, targets) at each controller tick
    failed: int
    decisions: list[Decision] = field(default_factory=list)
    score_from_s: float = 0.0  # requests arriving and GPU time spent before this are warm-up, not scored
    gpu_hours_by_pool: dict[str, float] = field(default_factory=dict)  # ``gpu_hours`` split by pool


def replay(trace: RequestTrace, profile: Profile, controller: Controller, config: SimConfig,
           initial: Mapping[str, int], window_s: float, sample_s: float = 30.0,
           progress: Callable[[float], None] | None = None, score_from_s: float = 0.0, wake: bool = True) -> Replay:
    """Replay ``trace`` under ``controller``, ticking it every ``interval_s`` (the initial sizes hold for the first
    interval); ``wake``: a request for a policy at zero ticks it at once, as the router's wake signal does live
    (False: at the next grid point)."""
    cluster = Cluster(trace, profile, config, initial)
    if hasattr(controller, "budget_since_s"):
        controller.budget_since_s = score_from_s  # the SLA's window is the scored one (the warm-up is not)
    source = SimMetricSource(cluster)
    actuator = SimActuator(cluster)
    interval = float(controller.interval_s)
    next_tick = interval  # the initial sizes hold for the first interval
    next_sample = 0.0
    last_arrival = float(trace.arrival_s[-1]) if len(trace) else 0.0
    horizon = last_arrival + config.tail_s
    timeline: list[dict[str, float]] = []
    targets: list[tuple[float, dict[str, int]]] = []
    decisions: list[Decision] = []
    last_progress = -math.inf
    slept_at: float | None = None if any(n > 0 for n in initial.values()) else 0.0
    signalled = -math.inf  # the router's last wake signal

    def tick(t: float) -> None:
        nonlocal slept_at
        # A controller that reads nothing (a schedule known in advance) skips the metrics read.
        obs = source.read(window_s, t) if getattr(controller, "observes", True) else _UNREAD
        decision = controller.tick(obs, t)
        decisions.append(decision)
        tg = decision.targets()
        actuator.apply(tg)
        targets.append((t, dict(tg)))
        awake = any(n > 0 for n in tg.values())
        slept_at = None if awake else (t if slept_at is None else slept_at)

    while True:
        wake_s = wake_at(cluster, slept_at, signalled) if wake else math.inf
        t = min(next_tick, next_sample, wake_s)
        cluster.run_until(t)
        if t == next_sample:
            in_force = decisions[-1] if decisions else None
            row = _sample(cluster, source, t, sample_s, in_force)
            timeline.append(row | _at_load(getattr(controller, "spec", None), trace, t, sample_s, row, in_force))
            next_sample += sample_s
        if t == next_tick:
            tick(t)
            next_tick += interval
        elif t == wake_s:
            signalled = t
            if cluster.held():  # a request arrived (or still waits) for a policy at zero: it decides now
                tick(t)
        if progress is not None and t - last_progress >= 60.0:
            progress(min(t, last_arrival))
            last_progress = t
        if (cluster.finished and t >= last_arrival) or t >= horizon:
            break
    if progress is not None:
        progress(last_arrival)
    return finished_replay(controller.name, cluster, actuator, timeline, targets, decisions, trace, score_from_s)


def finished_replay(name: str, cluster: Cluster, actuator: SimActuator, timeline: list[dict[str, float]],
                    targets: list[tuple[float, dict[str, int]]], decisions: list[Decision], trace: RequestTrace,
                    score_from_s: float) -> Replay:
    """The run's end: what never finished fails, and the GPU time after ``score_from_s`` is billed."""
    cluster.fail_unfinished()
    res = cluster.results()
    fin = res["finish_s"]
    last_arrival = float(trace.arrival_s[-1]) if len(trace) else 0.0
    end_s = max(last_arrival, float(np.nanmax(fin)) if np.isfinite(fin).any() else 0.0)
    start_s = min(score_from_s, end_s)
    by_pool = {str(p): (cluster.gpu_seconds(end_s, p) - cluster.gpu_seconds(start_s, p)) / 3600.0
               for p in cluster.pools}
    return Replay(name, res, timeline, sum(by_pool.values()), end_s, actuator.changes, targets,
                  cluster.failed_count, decisions, score_from_s, by_pool)


_UNREAD = NoData(NoDataReason.EMPTY, "not read: the controller follows a schedule", 0.0)


def wake_at(cluster: Cluster, slept_at: float | None, signalled: float) -> float:
    """When the router next signals a policy at zero (``slept_at`` None: awake, never): at the first request it
    holds, and again every WAKE_REPEAT_S while it still holds some (the wake's tick may grant nothing: a fleet
    budget that binds)."""
    if slept_at is None:
        return math.inf
    if cluster.held():  # the router's next repeat after now (requests held since before it slept: now)
        if not math.isfinite(signalled):
            return cluster.now
        return signalled + WAKE_REPEAT_S * max(1, math.floor((cluster.now - signalled) / WAKE_REPEAT_S) + 1)
    if cluster.next_arrival < cluster.log.count:
        return max(cluster.enter_s(cluster.next_arrival), signalled + WAKE_REPEAT_S)
    return math.inf


def _at_load(spec: object, trace: RequestTrace, t: float, window_s: float, row: Mapping[str, float],
             in_force: Decision | None) -> dict[str, float]:
    """The sizing model's prediction for the sample's ready replicas (``row``'s ``<pool>.ready``) at the
    window's own load; nothing without a model."""
    if not isinstance(spec, DeciderSpec):
        return {}
    ready = {str(p): row[f"{p}.ready"] for p in spec.pools}
    return predicted_at_load(spec, in_force, ready, window_load(trace, t, window_s))


def _sample(cluster: Cluster, source: SimMetricSource, t: float, window_s: float,
            in_force: Decision | None) -> dict[str, float]:
    """One timeline row. ``in_force``: the decision whose sizes serve this window (the last tick's); its
    predicted latency at those sizes (TTFT for prefill, ITL for decode, both for aggregated) sits beside the
    window's realised latency at the SLA percentile, so the model's bias can be read off (model_bias.py)."""
    row: dict[str, float] = {"t_s": t}
    for pool in cluster.pools:
        g = cluster.gauges(pool)
        for k, v in g.items():
            row[f"{pool}.{k}"] = float(v)
        pd = in_force.pools.get(pool) if in_force is not None else None
        ttft_pred, itl_pred = (pd.predicted_ttft_ms, pd.predicted_itl_ms) if pd is not None else (None, None)
        own = itl_pred if pool == "decode" else ttft_pred
        row[f"{pool}.predicted_ms"] = math.nan if own is None else float(own)
        if pool == "aggregated":
            row[f"{pool}.predicted_itl_ms"] = math.nan if itl_pred is None else float(itl_pred)
    ttft, itl = source.latency(window_s, t)
    row["ttft_ms_p50"], row["ttft_ms_p95"] = (ttft[0], ttft[1]) if ttft else (math.nan, math.nan)
    row["itl_ms_p50"], row["itl_ms_p95"] = (itl[0], itl[1]) if itl else (math.nan, math.nan)
    row["ttft_ms_at_sla"] = ttft[3] if ttft else math.nan
    row["itl_ms_at_sla"] = itl[3] if itl else math.nan
    row["first_tokens"] = float(len(source.ttfts_ms(window_s, t)))
    row["gpus"] = sum(row[f"{p}.gpus"] for p in cluster.pools)
    return row
