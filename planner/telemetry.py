"""Every metric the planner exports, defined once (dashboards and alerts may name only these).

Units follow Prometheus conventions (seconds, ratios); label values are bounded: ``policy`` and ``pool``
come from the policy file, ``reason`` from the closed Reason enum, ``kind`` from ERROR_KINDS, ``signal``
from the missing-signal detector's fixed list (ttft or itl for the resolution ratio). A value the planner
does not have (no observation, no prediction) *removes* the series instead of writing 0: a dashboard then
shows a gap, never a fake zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from planner.decide.decider import latency_at_observed
from planner.decide.spec import DeciderSpec
from planner.signals import SignalStatus
from planner.types import Decision, LoadForecast, NoData, NoDataReason, Observation, Reason, SlaBudget

# leader: the Lease cannot be taken or renewed (403, unreachable) or a write was refused because it may have
# expired; seed: the targets' spec.replicas could not be read before the first decision; event: a Kubernetes
# Event could not be created.
ERROR_KINDS = tuple(f"no_data_{r.value}" for r in NoDataReason) + (
    "forecast", "decide", "actuate", "leader", "seed", "event", "internal")
REPLICA_STATES = ("starting", "ready", "draining")
ENGINE_EVENTS = ("launched", "ready", "start_timeout", "start_failed", "crashed", "port_taken", "no_free_port",
                 "drained", "drain_timeout", "killed")
ROUTER_OUTCOMES = ("ok", "client_error", "failed")
ROUTER_ERRORS = ("connect", "upstream_5xx", "timeout", "mid_stream", "no_replica")
ROUTER_HOLD_REFUSALS = ("queue_full", "timeout")  # why a request held for want of a replica got 503
HOLD_BUCKETS_S = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0)
TICK_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PlannerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        pp = ["policy", "pool"]
        self.desired_replicas = Gauge("planner_desired_replicas", "Replicas the planner asks for (contract: "
                                      "KEDA/HPA scale on this with AverageValue 1).", pp, registry=r)
        self.desired_unclamped_replicas = Gauge("planner_desired_unclamped_replicas", "Replicas the SLA "
                                                "model asked for before behaviour, limits and budget.", pp,
                                                registry=r)
        self.ready_replicas = Gauge("planner_ready_replicas", "Live engine replicas seen in the last "
                                    "observation.", pp, registry=r)
        self.gpus_desired = Gauge("planner_gpus_desired", "GPUs the desired replicas use.", ["policy"], registry=r)
        self.gpus_in_use = Gauge("planner_gpus_in_use", "GPUs of the ready replicas.", ["policy"], registry=r)
        self.forecast_mean = Gauge("planner_forecast_mean", "Forecast mean at the decision horizon; signal is "
                                   "rate_rps, isl_tokens or osl_tokens.", ["policy", "signal"], registry=r)
        self.forecast_quantile = Gauge("planner_forecast_quantile", "Forecast quantiles at the decision "
                                       "horizon.", ["policy", "signal", "quantile"], registry=r)
        self.observed_rate = Gauge("planner_observed_rate_rps", "Requests started per second over the "
                                   "observation window.", pp, registry=r)
        self.observed_ttft = Gauge("planner_observed_ttft_seconds", "Observed TTFT; stat is p50, p95 or "
                                   "mean.", [*pp, "stat"], registry=r)
        self.observed_itl = Gauge("planner_observed_itl_seconds", "Observed ITL; stat is p50, p95 or mean.",
                                  [*pp, "stat"], registry=r)
        self.signal_resolution_ratio = Gauge("planner_signal_resolution_ratio", "Width of the latency "
                                             "histogram's bucket that holds the SLA target, over the target: the "
                                             "relative error of a p95 read there; above 0.25 the p95 is unresolved "
                                             "(+Inf: the target is past the last bucket). signal is ttft or itl.",
                                             [*pp, "signal"], registry=r)
        self.predicted_ttft = Gauge("planner_predicted_ttft_seconds", "TTFT the profile predicts for the "
                                    "chosen sizes (pool=\"all\": end to end).", pp, registry=r)
        self.predicted_itl = Gauge("planner_predicted_itl_seconds", "ITL the profile predicts for the chosen "
                                   "sizes.", pp, registry=r)
        self.calibration_factor = Gauge("planner_calibration_factor", "Observed/predicted correction "
                                        "applied to the profile.", ["policy", "factor"], registry=r)
        self.model_bias = Gauge("planner_model_bias", "Realised latency at the SLA percentile over the latency "
                                "the sizing model predicted for the sizes in force (1: it spends what it sizes "
                                "for; 0.5: it delivers half the target); signal is ttft or itl.",
                                ["policy", "signal"], registry=r)
        self.model_bias_at_load = Gauge("planner_model_bias_at_load", "Realised latency at the SLA percentile "
                                        "over what the sizing model (its calibration in force) predicts for the "
                                        "ready replicas at the load the window measured: the model's own error, "
                                        "the forecast's headroom left out; signal is ttft or itl.",
                                        ["policy", "signal"], registry=r)
        self.last_decision_reason = Gauge("planner_last_decision_reason", "1 for each reason of the last "
                                          "decision, 0 for the others.", ["policy", "reason"], registry=r)
        self.decisions = Counter("planner_decisions", "Decisions by reason.", ["policy", "reason"], registry=r)
        self._define_budget(r)
        self._define_health(r, pp)

    def _define_budget(self, r: CollectorRegistry) -> None:
        """The error budget's gauges and the headroom and percentile it picks."""
        self.headroom_quantile = Gauge("planner_headroom_quantile", "The forecast quantile the pools were "
                                       "sized at: sla.lean_quantile while the error budget is healthy, "
                                       "sla.recover_quantile once it is (nearly) spent, forecast.quantile otherwise.",
                                       ["policy"], registry=r)
        self.decode_quantile = Gauge("planner_decode_quantile", "The forecast quantile whose load set the decode "
                                     "pool's size: forecast.quantile where the KV guard raised it while the pools "
                                     "lean (reason decode_kv_guard), the headroom's otherwise.", ["policy"],
                                     registry=r)
        self.sizing_percentile = Gauge("planner_sizing_percentile", "The latency percentile (0..1) the pools were "
                                       "sized at: the SLA's, or a stricter one while its error budget is spent "
                                       "(sla.recover_miss_share of its allowed misses).", ["policy"], registry=r)
        self.sla_budget_remaining = Gauge("planner_sla_budget_remaining", "Share of the SLA window's allowed "
                                          "misses left (1: none spent; below 0: overspent); with "
                                          "sla.budget_control.", ["policy"], registry=r)
        self.sla_burn_rate = Gauge("planner_sla_burn_rate", "Miss share over the window divided by the share "
                                   "the SLA allows (1: the budget lasts exactly sla.window_s); window is short "
                                   "(5 min) or long (1 h).", ["policy", "window"], registry=r)
        self.sla_attainment = Gauge("planner_sla_attainment", "Share of requests that met the SLA over "
                                    "sla.window_s, as the controller measured it.", ["policy"], registry=r)

    def _define_health(self, r: CollectorRegistry, pp: list[str]) -> None:
        """The controller's own health: signals, ticks, errors, leadership, engines, the SLA, conflicts."""
        self.signal_seconds_since_good = Gauge("planner_signal_seconds_since_good", "Seconds since the "
                                               "signal was last good.", ["policy", "signal"], registry=r)
        self.signal_missing = Gauge("planner_signal_missing", "1 while a needed signal has been absent or "
                                    "stale for the configured number of intervals.", ["policy", "signal"],
                                    registry=r)
        self.ready = Gauge("planner_ready", "1 when every needed signal is present, 0 when degraded.",
                           ["policy"], registry=r)
        self.tick_duration = Histogram("planner_tick_duration_seconds", "Duration of one control tick.",
                                       ["policy"], buckets=TICK_BUCKETS_S, registry=r)
        self.read_duration = Histogram("planner_observation_read_seconds", "Duration of one metrics read.",
                                       ["policy"], buckets=TICK_BUCKETS_S, registry=r)
        self.errors = Counter("planner_errors", "Errors by kind.", ["policy", "kind"], registry=r)
        # Actuator kind process: the engine processes it runs (state from REPLICA_STATES, event from ENGINE_EVENTS).
        self.engine_replicas = Gauge("planner_engine_replicas", "Local engine replicas of the process actuator "
                                     "by state (starting, ready, draining).", [*pp, "state"], registry=r)
        self.engine_events = Counter("planner_engine_events", "Process actuator events by kind (launched, ready, "
                                     "start_timeout, start_failed, crashed, port_taken, ...).", [*pp, "event"],
                                     registry=r)
        self.leader = Gauge("planner_leader", "1 while this controller holds the Lease and acts, 0 while it "
                            "stands by (absent without --leader-elect).", ["policy"], registry=r)
        # The policy's SLA as a series, so that dashboards draw it and alerts compare against it without
        # copying the policy file's numbers (signal ttft or itl, at the policy's sla.percentile).
        self.sla_seconds = Gauge("planner_sla_seconds", "The policy's SLA target (signal ttft or itl) at its "
                                 "percentile.", ["policy", "signal"], registry=r)
        self.sla_percentile = Gauge("planner_sla_percentile", "The percentile the policy's SLA is written "
                                    "against (95: p95).", ["policy"], registry=r)
        self.actuation_conflicts = Counter("planner_actuation_conflicts", "Scale writes answered 409 Conflict "
                                           "(re-read before writing again).", pp, registry=r)
        self._define_fleet(r)

    def _define_fleet(self, r: CollectorRegistry) -> None:
        """`planner run --fleet`: what each policy asked of the shared GPU budget and what it was granted."""
        self.fleet_budget_gpus = Gauge("planner_fleet_budget_gpus", "The fleet's GPU budget (fleet.yaml "
                                       "budget.max_gpus).", registry=r)
        self.fleet_gpus = Gauge("planner_fleet_gpus", "The fleet's GPUs: state wanted (what the policies decided "
                                "alone), granted (after the fleet stage) or in_use (ready replicas observed).",
                                ["state"], registry=r)
        self.fleet_policy_gpus = Gauge("planner_fleet_policy_gpus", "One policy's GPUs in the fleet: state wanted "
                                       "or granted.", ["policy", "state"], registry=r)
        self.fleet_clamp = Gauge("planner_fleet_clamp", "1 while the fleet grants the policy fewer GPUs than it "
                                 "decided, labelled by why (fleet_priority, fleet_wake or fleet_share); absent "
                                 "otherwise.",
                                 ["policy", "reason"], registry=r)

    def family_names(self) -> frozenset[str]:
        return frozenset(m.name for m in self.registry.collect())


class RouterMetrics:
    """What `planner route` exports on its own /metrics (labels: endpoint completions|chat, pool, replica
    host:port from the actuator's port_range, outcome from ROUTER_OUTCOMES, kind from ROUTER_ERRORS)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter("planner_router_requests", "Requests the router answered, by endpoint and "
                                "outcome (ok, client_error: the engine's 4xx passed on, failed).",
                                ["endpoint", "outcome"], registry=r)
        self.errors = Counter("planner_router_errors", "Failed attempts on a replica, by pool and kind "
                              "(connect, upstream_5xx, timeout, mid_stream, no_replica).", ["pool", "kind"],
                              registry=r)
        self.retries = Counter("planner_router_retries", "Attempts sent to another replica after one failed.",
                               ["pool"], registry=r)
        self.outstanding = Gauge("planner_router_outstanding", "Requests in flight on each replica through "
                                 "the router.", ["pool", "replica"], registry=r)
        self.replicas = Gauge("planner_router_replicas", "Replicas in rotation.", ["pool"], registry=r)
        # Scale to zero (router/hold.py): requests held while a pool the route needs has no replica in rotation.
        self.held = Gauge("planner_router_held", "Requests held now, waiting for a replica in rotation.",
                          registry=r)
        self.held_requests = Counter("planner_router_held_requests", "Requests held for want of a replica in "
                                     "rotation (released when one enters it, or refused).", registry=r)
        self.hold_refused = Counter("planner_router_hold_refused", "Held requests answered 503 with Retry-After, "
                                    "by why (queue_full, timeout).", ["why"], registry=r)
        self.hold_seconds = Histogram("planner_router_hold_seconds", "How long released requests were held.",
                                      buckets=HOLD_BUCKETS_S, registry=r)
        self.wake_signals = Counter("planner_router_wake_signals", "Wake signals sent to the controller "
                                    "(POST /v1/wake), by outcome (ok, failed).", ["outcome"], registry=r)


def exported_series_names(metrics: PlannerMetrics | None = None) -> frozenset[str]:
    """Every series name the planner can expose (with _total/_bucket/_sum/_count), for dashboard checks."""
    m = metrics or PlannerMetrics()
    names: set[str] = set()
    for family in m.registry.collect():
        if family.type == "counter":
            names.update({f"{family.name}_total"})
        elif family.type == "histogram":
            names.update({f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"})
        else:
            names.add(family.name)
    return frozenset(names)


def _set(gauge: Gauge, labels: Mapping[str, str], value: float | None, scale: float = 1.0) -> None:
    if value is None or not math.isfinite(value):
        try:
            gauge.remove(*labels.values())
        except KeyError:
            pass
        return
    gauge.labels(**labels).set(value * scale)


def record_decision(metrics: PlannerMetrics, policy: str, decision: Decision,
                    forecast: LoadForecast | None = None, observation: Observation | NoData | None = None,
                    in_force: Decision | None = None, spec: DeciderSpec | None = None) -> None:
    """Export one tick's decision, the forecast it used and the observation it saw; ``in_force``: the
    decision whose sizes served that observation's window (the previous tick's), for the model's bias;
    ``spec``: the sizing model, for its bias at the load the window measured."""
    reasons = set(decision.reasons)
    for pool, d in decision.pools.items():
        labels = {"policy": policy, "pool": pool}
        metrics.desired_replicas.labels(**labels).set(d.replicas)
        _set(metrics.desired_unclamped_replicas, labels, d.desired_unclamped)
        _set(metrics.predicted_ttft, labels, d.predicted_ttft_ms, 1e-3)
        _set(metrics.predicted_itl, labels, d.predicted_itl_ms, 1e-3)
        reasons.update(d.reasons)
    _set(metrics.predicted_ttft, {"policy": policy, "pool": "all"}, decision.predicted_ttft_ms, 1e-3)
    _set(metrics.predicted_itl, {"policy": policy, "pool": "all"}, decision.predicted_itl_ms, 1e-3)
    metrics.gpus_desired.labels(policy=policy).set(decision.gpus)
    for reason in Reason:
        metrics.last_decision_reason.labels(policy=policy, reason=reason.value).set(1 if reason in reasons else 0)
    for reason in reasons:
        metrics.decisions.labels(policy=policy, reason=Reason(reason).value).inc()
    for key, value in decision.detail.items():
        # The decider reports its bounded corrections as detail["ttft_factor"] / detail["itl_factor"].
        if key.endswith("_factor") and isinstance(value, int | float):
            _set(metrics.calibration_factor, {"policy": policy, "factor": key.removesuffix("_factor")},
                 float(value))
    headroom = decision.detail.get("headroom_quantile")
    _set(metrics.headroom_quantile, {"policy": policy}, float(headroom) if isinstance(headroom, int | float) else None)
    decode_q = decision.detail.get("decode_quantile")
    _set(metrics.decode_quantile, {"policy": policy}, float(decode_q) if isinstance(decode_q, int | float) else None)
    pct = decision.detail.get("sizing_percentile")
    _set(metrics.sizing_percentile, {"policy": policy}, float(pct) if isinstance(pct, int | float) else None)
    if forecast is not None:
        record_forecast(metrics, policy, forecast)
    if observation is not None:
        record_observation(metrics, policy, observation, decision)
        if isinstance(observation, Observation) and in_force is not None:
            record_model_bias(metrics, policy, observation, in_force)
            if spec is not None:
                at_load = latency_at_observed(spec, observation, in_force)
                _record_bias(metrics.model_bias_at_load, policy, observation, {str(p): v for p, v in at_load.items()})


def record_model_bias(metrics: PlannerMetrics, policy: str, observation: Observation, in_force: Decision) -> None:
    """Realised at the SLA percentile / predicted by the decision in force, per signal (as a backtest's
    model_bias, one interval at a time); no series where either is unknown."""
    _record_bias(metrics.model_bias, policy, observation,
                 {p: (d.predicted_ttft_ms, d.predicted_itl_ms) for p, d in in_force.pools.items()})


def _record_bias(gauge: Gauge, policy: str, observation: Observation,
                 predicted: Mapping[str, tuple[float | None, float | None]]) -> None:
    """Realised at the SLA percentile / ``predicted`` (per pool, TTFT and ITL ms), per signal."""
    for signal in ("ttft", "itl"):
        ratio = None
        for pool, (ttft, itl) in predicted.items():
            value = ttft if signal == "ttft" else itl
            o = observation.pools.get(pool)
            if value is None or not math.isfinite(value) or value <= 0 or o is None:
                continue
            realised = o.ttft_ms_at_sla if signal == "ttft" else o.itl_ms_at_sla
            ratio = realised / value if realised is not None else None
        _set(gauge, {"policy": policy, "signal": signal}, ratio)


def record_budget(metrics: PlannerMetrics, policy: str, budget: SlaBudget | None) -> None:
    """The error budget as the controller measured it (no series while unknown)."""
    labels = {"policy": policy}
    _set(metrics.sla_budget_remaining, labels, budget.remaining if budget else None)
    _set(metrics.sla_attainment, labels, budget.attainment if budget else None)
    _set(metrics.sla_burn_rate, {**labels, "window": "short"}, budget.burn_short if budget else None)
    _set(metrics.sla_burn_rate, {**labels, "window": "long"}, budget.burn_long if budget else None)


def record_forecast(metrics: PlannerMetrics, policy: str, forecast: LoadForecast) -> None:
    record_budget(metrics, policy, forecast.sla_budget)
    for signal, f in (("rate_rps", forecast.rate_rps), ("isl_tokens", forecast.isl_tokens),
                      ("osl_tokens", forecast.osl_tokens)):
        _set(metrics.forecast_mean, {"policy": policy, "signal": signal}, f.mean if f.ok else None)
        for q, v in f.quantiles.items():
            _set(metrics.forecast_quantile, {"policy": policy, "signal": signal, "quantile": f"{q:g}"},
                 v if f.ok else None)


def record_observation(metrics: PlannerMetrics, policy: str, observation: Observation | NoData,
                       decision: Decision | None = None) -> None:
    if isinstance(observation, NoData):
        record_error(metrics, policy, f"no_data_{observation.reason.value}")
        return
    gpus = 0
    known = decision is not None
    for pool, o in observation.pools.items():
        labels = {"policy": policy, "pool": pool}
        _set(metrics.observed_rate, labels, o.rate_rps)
        _set(metrics.ready_replicas, labels, None if o.ready_replicas is None else float(o.ready_replicas))
        for stat, ttft, itl in (("p50", o.ttft_ms_p50, o.itl_ms_p50), ("p95", o.ttft_ms_p95, o.itl_ms_p95),
                                ("mean", o.ttft_ms_mean, o.itl_ms_mean)):
            _set(metrics.observed_ttft, {**labels, "stat": stat}, ttft, 1e-3)
            _set(metrics.observed_itl, {**labels, "stat": stat}, itl, 1e-3)
        for signal, ratio in (("ttft", o.ttft_p95_resolution), ("itl", o.itl_p95_resolution)):
            if ratio is None:  # not assessed: no series rather than a made-up value
                _set(metrics.signal_resolution_ratio, {**labels, "signal": signal}, None)
            else:  # +Inf is a value here (no bucket resolves the target), not a missing one
                metrics.signal_resolution_ratio.labels(**labels, signal=signal).set(ratio)
        if decision is not None and pool in decision.pools and o.ready_replicas is not None:
            gpus += o.ready_replicas * decision.pools[pool].gpus_per_replica
        else:
            known = False
    _set(metrics.gpus_in_use, {"policy": policy}, float(gpus) if known else None)


def record_signals(metrics: PlannerMetrics, policy: str, status: SignalStatus) -> None:
    for signal, age in status.seconds_since_good.items():
        labels = {"policy": policy, "signal": signal}
        _set(metrics.signal_seconds_since_good, labels, age)
        metrics.signal_missing.labels(**labels).set(1 if signal in status.missing else 0)
    metrics.ready.labels(policy=policy).set(1 if status.ready else 0)


def record_sla(metrics: PlannerMetrics, policy: str, ttft_ms: float, itl_ms: float, percentile: float) -> None:
    metrics.sla_seconds.labels(policy=policy, signal="ttft").set(ttft_ms * 1e-3)
    metrics.sla_seconds.labels(policy=policy, signal="itl").set(itl_ms * 1e-3)
    metrics.sla_percentile.labels(policy=policy).set(percentile)


def record_fleet(metrics: PlannerMetrics, budget_gpus: int, wanted: Mapping[str, int], granted: Mapping[str, int],
                 reasons: Mapping[str, Reason | None], in_use_gpus: float | None) -> None:
    """Export one fleet tick: the budget, the fleet's GPUs wanted/granted/in use, and per policy wanted vs
    granted with the reason it got less (the reason's series is removed when it got all it asked for)."""
    metrics.fleet_budget_gpus.set(budget_gpus)
    metrics.fleet_gpus.labels(state="wanted").set(sum(wanted.values()))
    metrics.fleet_gpus.labels(state="granted").set(sum(granted.values()))
    _set(metrics.fleet_gpus, {"state": "in_use"}, in_use_gpus)
    for policy in wanted:
        metrics.fleet_policy_gpus.labels(policy=policy, state="wanted").set(wanted[policy])
        metrics.fleet_policy_gpus.labels(policy=policy, state="granted").set(granted[policy])
        for reason in (Reason.FLEET_PRIORITY, Reason.FLEET_WAKE, Reason.FLEET_SHARE):
            _set(metrics.fleet_clamp, {"policy": policy, "reason": reason.value},
                 1.0 if reasons.get(policy) is reason else None)


def record_error(metrics: PlannerMetrics, policy: str, kind: str) -> None:
    metrics.errors.labels(policy=policy, kind=kind if kind in ERROR_KINDS else "internal").inc()


def record_tick(metrics: PlannerMetrics, policy: str, seconds: float, read_seconds: float | None = None) -> None:
    metrics.tick_duration.labels(policy=policy).observe(seconds)
    if read_seconds is not None:
        metrics.read_duration.labels(policy=policy).observe(read_seconds)
