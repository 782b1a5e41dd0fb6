"""Telemetry: every metric defined once, missing values remove series, missing-signal detection, /readyz."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from planner.service.app import create_app
from planner.service.background import BackgroundServer
from planner.signals import (
    SignalTracker,
    log_changes,
    required_signals,
    signals_present,
)
from planner.telemetry import (
    ERROR_KINDS,
    PlannerMetrics,
    exported_series_names,
    record_decision,
    record_error,
    record_observation,
    record_signals,
    record_sla,
    record_tick,
)
from planner.testing.clock import FakeClock
from planner.types import (
    Decision,
    Forecast,
    LoadForecast,
    NoData,
    NoDataReason,
    Observation,
    PoolDecision,
    PoolObservation,
    Reason,
)


def sample(m: PlannerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def decision(replicas: int = 3, ttft: float | None = 400.0) -> Decision:
    return Decision(
        at_s=0.0,
        pools={"prefill": PoolDecision(replicas, 2, 2.6, (Reason.SLA_CAPACITY,), predicted_ttft_ms=ttft),
               "decode": PoolDecision(4, 1, 4.0, (Reason.FLOOR,), predicted_itl_ms=20.0)},
        reasons=(Reason.SLA_CAPACITY,), predicted_ttft_ms=ttft, detail={"ttft_factor": 1.25, "itl_factor": 0.8, "rate_rps": 3.0})


def forecast(ok: bool = True) -> LoadForecast:
    f = Forecast(mean=5.0, quantiles={0.5: 5.0, 0.9: 7.5}, horizon_s=150, model="last-value", ok=ok)
    return LoadForecast(f, f, f)


def observation() -> Observation:
    return Observation(0.0, 60.0, {
        "prefill": PoolObservation(30, 0.5, ttft_ms_p95=800.0, ttft_ms_p50=300.0, ready_replicas=2),
        "decode": PoolObservation(30, 0.5, itl_ms_p95=25.0, ready_replicas=3)})


def test_record_decision_exports_the_contract_gauge_and_reasons() -> None:
    m = PlannerMetrics()
    record_decision(m, "pol", decision(), forecast(), observation())
    assert sample(m, "planner_desired_replicas", policy="pol", pool="prefill") == 3
    assert sample(m, "planner_desired_replicas", policy="pol", pool="decode") == 4
    assert sample(m, "planner_desired_unclamped_replicas", policy="pol", pool="prefill") == 2.6
    assert sample(m, "planner_predicted_ttft_seconds", policy="pol", pool="prefill") == pytest.approx(0.4)
    assert sample(m, "planner_predicted_itl_seconds", policy="pol", pool="decode") == pytest.approx(0.02)
    assert sample(m, "planner_gpus_desired", policy="pol") == 10
    assert sample(m, "planner_gpus_in_use", policy="pol") == 2 * 2 + 3 * 1
    one_hot = {r.value: sample(m, "planner_last_decision_reason", policy="pol", reason=r.value) for r in Reason}
    assert {k for k, v in one_hot.items() if v == 1} == {"sla_capacity", "floor"}
    assert set(one_hot.values()) == {0.0, 1.0}
    assert sample(m, "planner_decisions_total", policy="pol", reason="floor") == 1
    assert sample(m, "planner_calibration_factor", policy="pol", factor="ttft") == 1.25
    assert sample(m, "planner_calibration_factor", policy="pol", factor="itl") == 0.8
    assert sample(m, "planner_calibration_factor", policy="pol", factor="rate_rps") is None
    assert sample(m, "planner_forecast_mean", policy="pol", signal="rate_rps") == 5
    assert sample(m, "planner_forecast_quantile", policy="pol", signal="osl_tokens", quantile="0.9") == 7.5
    assert sample(m, "planner_observed_ttft_seconds", policy="pol", pool="prefill", stat="p95") == pytest.approx(0.8)
    assert sample(m, "planner_observed_rate_rps", policy="pol", pool="decode") == 0.5
    assert sample(m, "planner_ready_replicas", policy="pol", pool="decode") == 3


def test_budget_headroom_and_the_live_model_bias() -> None:
    from dataclasses import replace

    from planner.types import SlaBudget

    m = PlannerMetrics()
    budget = SlaBudget(remaining=0.6, burn_short=1.5, burn_long=0.4, attainment=0.98, requests=9000.0)
    lean = replace(decision(), detail={"headroom_quantile": 0.5, "decode_quantile": 0.8, "sizing_percentile": 0.975})
    realised = Observation(30.0, 60.0, {
        "prefill": PoolObservation(30, 0.5, ttft_ms_at_sla=300.0, ready_replicas=2),
        "decode": PoolObservation(30, 0.5, itl_ms_at_sla=15.0, ready_replicas=3)})
    # The decision in force (previous tick) predicted 400 ms TTFT and 20 ms ITL for its sizes.
    record_decision(m, "pol", lean, replace(forecast(), sla_budget=budget), realised, in_force=decision())
    assert sample(m, "planner_model_bias", policy="pol", signal="ttft") == pytest.approx(300 / 400)
    assert sample(m, "planner_model_bias", policy="pol", signal="itl") == pytest.approx(15 / 20)
    assert sample(m, "planner_headroom_quantile", policy="pol") == 0.5
    assert sample(m, "planner_decode_quantile", policy="pol") == 0.8
    assert sample(m, "planner_sizing_percentile", policy="pol") == 0.975
    assert sample(m, "planner_sla_budget_remaining", policy="pol") == 0.6
    assert sample(m, "planner_sla_burn_rate", policy="pol", window="short") == 1.5
    assert sample(m, "planner_sla_attainment", policy="pol") == 0.98
    # Unknown budget, no decision in force, no headroom in the detail: no series, never a made-up zero.
    record_decision(m, "pol", decision(), forecast(), realised)
    for name, labels in (("planner_sla_budget_remaining", {}), ("planner_sla_burn_rate", {"window": "long"}),
                         ("planner_headroom_quantile", {}), ("planner_decode_quantile", {}),
                         ("planner_sizing_percentile", {})):
        assert sample(m, name, policy="pol", **labels) is None, name
    assert sample(m, "planner_model_bias", policy="pol", signal="ttft") == pytest.approx(0.75)  # kept: not re-read


def test_the_live_model_bias_at_the_load_the_window_measured() -> None:
    """planner_model_bias_at_load: realised over what the model, with the in-force decision's calibration,
    predicts for the ready replicas at the window's measured load, whatever that decision predicted at its
    forecast; no series while the decision in force did not size (a hold has no factors)."""
    from planner.decide.capacity import Load, decode_itl_ms, prefill_ttft_ms
    from planner.decide.spec import DeciderSpec
    from planner.policy_file import load_policy
    from planner.profile import load_profile

    pol = load_policy(Path(__file__).resolve().parent.parent / "policies" / "example.yaml")
    spec = DeciderSpec.build(pol, load_profile(pol.profile), 90.0)
    realised = Observation(30.0, 60.0, {
        "prefill": PoolObservation(600, 10.0, isl_mean=1200.0, ttft_ms_at_sla=300.0, ready_replicas=3),
        "decode": PoolObservation(600, 10.0, osl_mean=200.0, itl_ms_at_sla=15.0, ready_replicas=1)})
    load = Load(10.0, 1200.0, 200.0)
    m = PlannerMetrics()
    for in_force in (decision(ttft=400.0), decision(ttft=4000.0)):  # factors 1.25 (TTFT) and 0.8 (ITL)
        record_decision(m, "pol", decision(), forecast(), realised, in_force=in_force, spec=spec)
        assert sample(m, "planner_model_bias_at_load", policy="pol", signal="ttft") == pytest.approx(
            300.0 / prefill_ttft_ms(spec.model, load, 3, 1.25))
        assert sample(m, "planner_model_bias_at_load", policy="pol", signal="itl") == pytest.approx(
            15.0 / decode_itl_ms(spec.model, load, 1, 0.8))
    assert sample(m, "planner_model_bias", policy="pol", signal="ttft") == pytest.approx(300.0 / 4000.0)
    held = Decision(0.0, decision().pools, (Reason.NO_DATA_HOLD,), detail={"hold": "no data"})
    record_decision(m, "pol", decision(), forecast(), realised, in_force=held, spec=spec)
    assert sample(m, "planner_model_bias_at_load", policy="pol", signal="ttft") is None
    assert sample(m, "planner_model_bias", policy="pol", signal="ttft") == pytest.approx(300.0 / 400.0)


def test_missing_values_remove_series_instead_of_writing_zero() -> None:
    m = PlannerMetrics()
    record_decision(m, "pol", decision(ttft=400.0), forecast(), observation())
    record_decision(m, "pol", decision(ttft=None), forecast(ok=False),
                    Observation(0.0, 60.0, {"prefill": PoolObservation(0, 0.0), "decode": PoolObservation(0, 0.0)}))
    assert sample(m, "planner_predicted_ttft_seconds", policy="pol", pool="prefill") is None
    assert sample(m, "planner_forecast_mean", policy="pol", signal="rate_rps") is None
    assert sample(m, "planner_observed_ttft_seconds", policy="pol", pool="prefill", stat="p95") is None
    assert sample(m, "planner_gpus_in_use", policy="pol") is None  # ready replicas unknown
    assert sample(m, "planner_observed_rate_rps", policy="pol", pool="prefill") == 0  # measured zero is zero


def test_resolution_ratio_per_pool_and_signal() -> None:
    m = PlannerMetrics()
    unresolved = PoolObservation(10, 1.0, itl_p95_bracket_ms=(25.0, 50.0), itl_p95_resolution=0.625,
                                 itl_p95_resolved=False, ttft_p95_bracket_ms=(80_000.0, math.inf),
                                 ttft_p95_resolution=math.inf, ttft_p95_resolved=False)
    record_observation(m, "pol", Observation(0.0, 60.0, {"decode": unresolved}))
    assert sample(m, "planner_signal_resolution_ratio", policy="pol", pool="decode", signal="itl") == 0.625
    assert sample(m, "planner_signal_resolution_ratio", policy="pol", pool="decode", signal="ttft") == math.inf
    # Not assessed (no target, no buckets) removes the series: no made-up ratio.
    record_observation(m, "pol", Observation(0.0, 60.0, {"decode": PoolObservation(10, 1.0)}))
    assert sample(m, "planner_signal_resolution_ratio", policy="pol", pool="decode", signal="itl") is None
    assert "planner_signal_resolution_ratio" in exported_series_names()


def test_no_data_counts_an_error_of_its_reason() -> None:
    m = PlannerMetrics()
    record_observation(m, "pol", NoData(NoDataReason.STALE, "x", 0.0))
    record_error(m, "pol", "something-unbounded")
    assert sample(m, "planner_errors_total", policy="pol", kind="no_data_stale") == 1
    assert sample(m, "planner_errors_total", policy="pol", kind="internal") == 1
    assert "no_data_missing_pool" in ERROR_KINDS


def test_tick_histogram() -> None:
    m = PlannerMetrics()
    record_tick(m, "pol", 0.2, read_seconds=0.04)
    assert sample(m, "planner_tick_duration_seconds_count", policy="pol") == 1
    assert sample(m, "planner_observation_read_seconds_sum", policy="pol") == pytest.approx(0.04)


def test_the_policys_sla_in_seconds() -> None:
    m = PlannerMetrics()
    record_sla(m, "pol", ttft_ms=800.0, itl_ms=25.0, percentile=99.0)
    assert sample(m, "planner_sla_seconds", policy="pol", signal="ttft") == pytest.approx(0.8)
    assert sample(m, "planner_sla_seconds", policy="pol", signal="itl") == pytest.approx(0.025)
    assert sample(m, "planner_sla_percentile", policy="pol") == 99.0


def test_metrics_are_defined_once_per_registry_and_registries_are_independent() -> None:
    a, b = PlannerMetrics(), PlannerMetrics(CollectorRegistry())
    record_decision(a, "pol", decision())
    assert sample(b, "planner_desired_replicas", policy="pol", pool="prefill") is None
    with pytest.raises(ValueError, match="Duplicated"):
        PlannerMetrics(a.registry)


def test_exported_series_names_for_dashboard_checks() -> None:
    names = exported_series_names()
    assert {"planner_desired_replicas", "planner_errors_total", "planner_tick_duration_seconds_bucket",
            "planner_signal_missing", "planner_signal_seconds_since_good", "planner_ready"} <= names
    assert all(n.startswith("planner_") for n in names)


# ----------------------------------------------------------------------------------- missing signals
def busy(**over: float | None) -> PoolObservation:
    values = {"isl_mean": 100.0, "osl_mean": 50.0, "ttft_ms_p95": 300.0, "itl_ms_p95": 20.0}
    values.update(over)
    return PoolObservation(10, 1.0, **values)


PRESENT = [
    ("no-data", "prefill", NoData(NoDataReason.EMPTY, "", 0.0), set()),
    ("busy-prefill", "prefill", Observation(0, 60, {"prefill": busy()}), {"rate", "isl", "ttft"}),
    ("busy-decode", "decode", Observation(0, 60, {"decode": busy()}), {"rate", "osl", "itl", "running"}),
    ("busy-aggregated", "aggregated", Observation(0, 60, {"aggregated": busy()}),
     {"rate", "isl", "osl", "ttft", "itl", "running"}),
    ("idle-latencies-are-not-missing", "aggregated", Observation(0, 60, {"aggregated": PoolObservation(0, 0.0)}),
     {"rate", "isl", "osl", "ttft", "itl", "running"}),
    # A prefill engine serving max_tokens=1 exports no ITL and no output length: prefill is still whole.
    ("prefill-without-itl", "prefill", Observation(0, 60, {"prefill": busy(itl_ms_p95=None, osl_mean=None)}),
     {"rate", "isl", "ttft"}),
    ("decode-without-ttft", "decode", Observation(0, 60, {"decode": busy(ttft_ms_p95=None, isl_mean=None)}),
     {"rate", "osl", "itl", "running"}),
    ("decode-without-itl", "decode", Observation(0, 60, {"decode": busy(itl_ms_p95=None)}),
     {"rate", "osl", "running"}),
    ("other-pool-only", "prefill", Observation(0, 60, {"decode": busy()}), set()),
]


@pytest.mark.parametrize(("pool", "obs", "good"), [p[1:] for p in PRESENT], ids=[p[0] for p in PRESENT])
def test_signals_present(pool: str, obs: Observation | NoData, good: set[str]) -> None:
    got = signals_present(obs, [pool])
    assert {k.split("/")[1] for k, v in got.items() if v} == good
    assert set(got) == set(required_signals([pool]))


def test_each_pool_is_asked_only_for_what_its_sizing_uses() -> None:
    assert required_signals(["prefill", "decode"]) == (
        "prefill/rate", "prefill/isl", "prefill/ttft", "decode/rate", "decode/osl", "decode/itl", "decode/running")


def test_tracker_degrades_after_n_intervals_and_reports_each_change_once() -> None:
    clock = FakeClock(1000.0)
    t = SignalTracker(["p/rate", "p/itl"], interval_s=10, stale_after_intervals=3)
    log = []
    for present in ({"p/rate": True, "p/itl": True}, {"p/rate": True}, {"p/rate": True}, {"p/rate": True},
                    {"p/rate": True}, {"p/rate": True, "p/itl": True}):
        log.append((clock.now_s(), [(c.signal, c.missing) for c in t.update(present, clock.now_s())]))
        clock.advance(10)
    assert log == [(1000, []), (1010, []), (1020, []), (1030, [("p/itl", True)]), (1040, []),
                   (1050, [("p/itl", False)])]
    status = t.status(1050)
    assert status.ready and status.seconds_since_good == {"p/rate": 0, "p/itl": 0}


def test_a_signal_never_seen_goes_missing_from_the_first_read() -> None:
    t = SignalTracker(["p/ttft"], interval_s=30, stale_after_intervals=2)
    assert t.update({}, 0.0) == []
    changes = t.update({}, 60.0)
    assert [(c.signal, c.missing, c.seconds_since_good) for c in changes] == [("p/ttft", True, None)]
    status = t.status(60.0)
    assert not status.ready and status.missing == {"p/ttft"} and status.seconds_since_good["p/ttft"] is None


def test_record_signals_and_logging(caplog) -> None:
    m = PlannerMetrics()
    t = SignalTracker(["p/rate"], interval_s=1, stale_after_intervals=1)
    t.update({"p/rate": True}, 0.0)
    changes = t.update({}, 5.0)
    record_signals(m, "pol", t.status(5.0))
    assert sample(m, "planner_signal_missing", policy="pol", signal="p/rate") == 1
    assert sample(m, "planner_signal_seconds_since_good", policy="pol", signal="p/rate") == 5
    assert sample(m, "planner_ready", policy="pol") == 0
    with caplog.at_level(logging.INFO):
        log_changes(changes, logging.getLogger("planner.test"), "pol")
        log_changes(t.update({}, 6.0), logging.getLogger("planner.test"), "pol")  # no change: no log
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "p/rate missing" in caplog.text


def test_tracker_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        SignalTracker(["a"], interval_s=0, stale_after_intervals=1)


# ------------------------------------------------------------------------------------------ the app
def test_app_health_readiness_and_metrics() -> None:
    m = PlannerMetrics()
    record_decision(m, "pol", decision())
    t = SignalTracker(["p/rate"], interval_s=1, stale_after_intervals=1)
    state: dict[str, object] = {"status": None}
    with BackgroundServer(create_app(m.registry, lambda: state["status"])) as server:  # type: ignore[arg-type,return-value]
        client = httpx.Client(base_url=server.url)
        _check_app(client, t, state)


def _check_app(client: httpx.Client, t: SignalTracker, state: dict[str, object]) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert (r.status_code, r.json()["status"]) == (503, "starting")
    t.update({"p/rate": True}, 0.0)
    state["status"] = t.status(0.0)
    assert client.get("/readyz").status_code == 200
    t.update({}, 2.0)
    state["status"] = t.status(2.0)
    r = client.get("/readyz")
    assert (r.status_code, r.json()["status"], r.json()["missing"]) == (503, "degraded", ["p/rate"])
    text = client.get("/metrics").text
    assert 'planner_desired_replicas{policy="pol",pool="prefill"} 3.0' in text


def test_monitor_for_policy_exports_logs_once_and_feeds_readiness(caplog) -> None:
    from planner.policy_file import load_policy
    from planner.service.monitor import MissingSignalMonitor

    policy = load_policy(Path(__file__).resolve().parent.parent / "policies" / "example.yaml")
    m = PlannerMetrics()
    mon = MissingSignalMonitor.for_policy(policy, m)
    assert mon.status() is None
    ok = Observation(0, 60, {"prefill": busy(), "decode": busy()})
    gone = NoData(NoDataReason.UNREACHABLE, "down", 0)
    with caplog.at_level(logging.WARNING, logger="planner.signals"):
        assert mon.observe(ok, 0.0).ready
        for k in range(1, 6):  # interval 30 s, 3 intervals: missing from t=90 on
            status = mon.observe(gone, 30.0 * k)
    assert not status.ready and len(status.missing) == 7
    # One line for the outage when it starts, not one per signal and not one per tick.
    assert [r.getMessage() for r in caplog.records] == [
        f"policy {policy.name}: metrics source unreachable (down); holding: no scale-down until it answers"]
    assert sample(m, "planner_ready", policy=policy.name) == 0
    assert sample(m, "planner_signal_seconds_since_good", policy=policy.name, signal="decode/itl") == 150
