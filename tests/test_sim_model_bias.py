"""The sizing model's bias: realised / predicted latency per scored sample, and what the replay records."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from planner.controller import make_planner_controller
from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.model_bias import MIN_REQUESTS, model_bias, ratios
from planner.sim.evaluate.replay import replay
from planner.sim.traces.synthetic import constant

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
