"""The sizing model's bias: realised / predicted latency per scored sample, and what the replay records."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from planner.controller import PlannerController, make_planner_controller
from planner.decide.capacity import Load
from planner.decide.spec import DeciderSpec
from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.baselines.static import StaticController
from planner.sim.evaluate.model_bias import (
    AT_LOAD,
    MIN_REQUESTS,
    model_bias,
    predicted_at_load,
    ratios,
    window_load,
)
from planner.sim.evaluate.replay import replay
from planner.sim.evaluate.scoring import summarise
from planner.sim.traces.records import RequestTrace
from planner.sim.traces.synthetic import constant
from planner.types import QUANTILES, Decision, Forecast, LoadForecast, PoolDecision

REPO = Path(__file__).resolve().parent.parent


def row(t_s: float, first: float, pred_ttft: float, real_ttft: float, pred_itl: float = math.nan,
        real_itl: float = math.nan) -> dict[str, float]:
    return {"t_s": t_s, "first_tokens": first, "prefill.predicted_ms": pred_ttft, "ttft_ms_at_sla": real_ttft,
            "decode.predicted_ms": pred_itl, "itl_ms_at_sla": real_itl}


@pytest.mark.parametrize("rows, score_from_s, expected", [
    pytest.param([row(60, 50, 1000, 500), row(90, 50, 800, 800)], 0.0, [0.5, 1.0], id="two-samples"),
    pytest.param([row(30, 50, 1000, 500), row(90, 50, 800, 800)], 60.0, [1.0], id="warm-up-not-scored"),
    pytest.param([row(60, MIN_REQUESTS - 1, 1000, 500), row(90, MIN_REQUESTS, 1000, 700)], 0.0, [0.7],
                 id="too-few-requests"),
    pytest.param([row(60, 50, math.nan, 500), row(90, 50, 1000, math.nan), row(120, 50, 0.0, 5)], 0.0, [],
                 id="no-prediction-no-realised-or-zero"),
])
def test_ratios_table(rows: list[dict[str, float]], score_from_s: float, expected: list[float]) -> None:
    assert ratios(rows, score_from_s, "ttft").tolist() == pytest.approx(expected)


def test_summary_has_quantiles_per_signal_and_none_without_predictions() -> None:
    rows = [row(30.0 * i, 50, 100.0, 10.0 * i, 20.0, 10.0) for i in range(1, 11)]
    bias = model_bias(rows, 0.0)
    assert bias is not None and bias["ttft"]["intervals"] == 10 and bias["itl"]["median"] == pytest.approx(0.5)
    assert bias["ttft"]["median"] == pytest.approx(float(np.median([0.1 * i for i in range(1, 11)])), abs=1e-4)
    assert bias["ttft"]["p10"] < bias["ttft"]["median"] < bias["ttft"]["p90"]
    assert model_bias([row(30.0, 50, math.nan, 500)], 0.0) is None


def test_the_replay_records_the_prediction_of_the_decision_in_force() -> None:
    pol = load_policy(REPO / "policies" / "example.yaml")
    prof = load_profile(pol.profile)
    tr = constant(12.0, 900.0, isl=1200, osl=200, seed=2)
    c = make_planner_controller(pol, prof, "last-value", {"prefill": 4, "decode": 2})
    rep = replay(tr, prof, c, SimConfig(startup_s=60.0), {"prefill": 4, "decode": 2}, window_s=60.0)
    ticks = [d.at_s for d in rep.decisions]
    checked = 0
    for r in rep.timeline:
        before = [i for i, t in enumerate(ticks) if t < r["t_s"]]
        if not before:
            assert math.isnan(r["prefill.predicted_ms"])
            continue
        d = rep.decisions[before[-1]]
        for pool, key, want in (("prefill", "prefill.predicted_ms", d.pools["prefill"].predicted_ttft_ms),
                                ("decode", "decode.predicted_ms", d.pools["decode"].predicted_itl_ms)):
            if want is None:
                assert math.isnan(r[key]), pool
            else:
                assert r[key] == pytest.approx(want), pool
                checked += 1
    assert checked > 40
    # The realised figure is the window's latency at the SLA percentile (95 here: the p95 itself).
    assert all(r["ttft_ms_at_sla"] == r["ttft_ms_p95"] or math.isnan(r["ttft_ms_p95"]) for r in rep.timeline)


class GivenLoad:
    """A LoadForecaster that always forecasts the same load (the test's stand-in for a forecast that is off)."""

    def __init__(self, rate_rps: float, isl: float, osl: float) -> None:
        self.load = (rate_rps, isl, osl)

    def forecast(self, history: object, now_s: float) -> tuple[LoadForecast, bool]:
        rate, isl, osl = self.load

        def given(v: float) -> Forecast:
            return Forecast(v, dict.fromkeys(QUANTILES, v), 90.0, "given")

        return LoadForecast(given(rate), given(isl), given(osl), given(rate * isl), given(rate * osl)), False


@pytest.mark.parametrize("overstated, at_forecast_ttft", [
    pytest.param(1.0, (0.85, 1.15), id="forecast-right"),
    pytest.param(2.0, (0.0, 0.6), id="forecast-twice-the-load"),
])
def test_bias_at_the_load_that_came_leaves_the_forecast_out(overstated: float,
                                                             at_forecast_ttft: tuple[float, float]) -> None:
    """A forecast of twice the load sizes larger pools, which deliver far below what was predicted at that load
    (the headroom shows in model_bias), while the same model asked at the load that came still predicts what the
    ready replicas deliver."""
    pol = load_policy(REPO / "policies" / "example.yaml")
    prof = load_profile(pol.profile)
    tr = constant(12.0, 900.0, isl=1200, osl=200, seed=2)
    c = PlannerController(pol, prof, GivenLoad(12.0 * overstated, 1200, 200))
    rep = replay(tr, prof, c, SimConfig(startup_s=60.0), {"prefill": 4, "decode": 2}, window_s=60.0,
                 score_from_s=300.0)
    forecast, came = model_bias(rep.timeline, 300.0), model_bias(rep.timeline, 300.0, AT_LOAD)
    assert forecast is not None and came is not None
    assert at_forecast_ttft[0] <= forecast["ttft"]["median"] <= at_forecast_ttft[1]
    assert 0.85 <= came["ttft"]["median"] <= 1.15 and 0.85 <= came["itl"]["median"] <= 1.15
    assert came["ttft"]["intervals"] >= 15
    assert summarise(rep, pol, tr.duration_s)["model_bias_at_load"] == came


def test_a_baseline_without_a_sizing_model_records_no_bias_at_load() -> None:
    pol = load_policy(REPO / "policies" / "example.yaml")
    prof = load_profile(pol.profile)
    tr = constant(12.0, 300.0, isl=1200, osl=200, seed=2)
    c = StaticController(pol, prof, {"prefill": 4, "decode": 2})
    rep = replay(tr, prof, c, SimConfig(startup_s=60.0), {"prefill": 4, "decode": 2}, window_s=60.0)
    assert not any(k.endswith("predicted_at_load_ms") for k in rep.timeline[-1])
    assert "model_bias_at_load" not in summarise(rep, pol, tr.duration_s)


def test_window_load_is_what_arrived_in_the_window() -> None:
    tr = RequestTrace(np.array([1.0, 10.0, 20.0, 30.0, 31.0]), np.array([100, 300, 3000, 500, 700]),
                      np.array([10, 20, 30, 40, 50]))
    arrived = window_load(tr, 30.0, 20.0)  # (10, 30]: the requests at 20 and 30
    assert arrived is not None
    load, mix = arrived
    assert load == Load(2 / 20.0, 1750.0, 35.0)
    # the engines' 1-2-5 buckets: 500 in (200, 500], 3000 in (2000, 5000]
    assert mix is not None and 200 < min(mix.tokens) and max(mix.tokens) <= 5000
    assert window_load(tr, 60.0, 20.0) is None


def test_no_prediction_at_load_without_factors_or_ready_replicas() -> None:
    pol = load_policy(REPO / "policies" / "example.yaml")
    spec = DeciderSpec.build(pol, load_profile(pol.profile), 90.0)
    arrived = (Load(12.0, 1200.0, 200.0), None)
    pools = {"prefill": PoolDecision(3, 1, 3.0, ()), "decode": PoolDecision(1, 2, 1.0, ())}
    sized = Decision(30.0, pools, (), detail={"ttft_factor": 1.0, "itl_factor": 1.0})
    held = Decision(30.0, pools, (), detail={"hold": "no data"})
    ok = predicted_at_load(spec, sized, {"prefill": 3.0, "decode": 1.0}, arrived)
    assert all(math.isfinite(v) and v > 0 for v in ok.values()) and set(ok) == {
        "prefill.predicted_at_load_ms", "decode.predicted_at_load_ms"}
    doubled = predicted_at_load(spec, replace_factors(sized, 2.0), {"prefill": 3.0, "decode": 1.0}, arrived)
    assert doubled["prefill.predicted_at_load_ms"] == pytest.approx(2.0 * ok["prefill.predicted_at_load_ms"])
    for decision, ready, load in ((held, {"prefill": 3.0, "decode": 1.0}, arrived),
                                  (sized, {"prefill": 0.0, "decode": 1.0}, arrived),
                                  (sized, {"prefill": 3.0, "decode": 1.0}, None)):
        out = predicted_at_load(spec, decision, ready, load)
        assert math.isnan(out["prefill.predicted_at_load_ms"])


def replace_factors(decision: Decision, ttft_factor: float) -> Decision:
    return Decision(decision.at_s, decision.pools, decision.reasons,
                    detail={**decision.detail, "ttft_factor": ttft_factor})


def test_the_report_says_both_biases_per_policy_that_predicts() -> None:
    from io import StringIO

    from rich.console import Console

    from planner.sim.evaluate.report import bias_lines
    from planner.sim.evaluate.summary_table import render_summary

    def entry(**extra: object) -> dict:
        return {"requests": 100, "attainment_ttft": 0.97, "attainment_itl": 1.0, "attainment_joint": 0.97,
                "ttft_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0}, "itl_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0},
                "gpu_hours": 1.0, "scale_events": 0, "direction_changes_per_hour": 0.0, "failed_requests": 0, **extra}

    stat = {"median": 0.84, "p10": 0.5, "p90": 1.2, "intervals": 90}
    report = {"policies": {
        "planner": entry(model_bias={"ttft": stat, "itl": {**stat, "median": 0.91}},
                         model_bias_at_load={"ttft": {**stat, "median": 0.99}, "itl": {**stat, "median": 0.97}}),
        "static": entry()}}
    want = ("planner: TTFT 0.84 at the forecast's load, 0.99 at the load that came; "
            "ITL 0.91 at the forecast's load, 0.97 at the load that came")
    assert bias_lines(report) == [want]
    buf = StringIO()
    render_summary(report, Console(file=buf, width=300))
    assert want in buf.getvalue()
