"""Calibration learns from exact means where the engine's histogram buckets cannot resolve the p95 near the
target (vLLM's ITL buckets 10/25/50 ms around a 40 ms target), and from the p95 where they can."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.decide.calibration import calibrate
from planner.decide.capacity import Load, prefill_ttft_mean_ms, prefill_ttft_ms
from planner.decide.state import PlannerState
from planner.types import Observation
from tests.support.decide_support import free_policy, pool_obs, spec

SPEC = spec(free_policy())
RATE, ISL, OSL, READY = 30.0, 1200.0, 220.0, 8


def observed(ttft_p95: float, ttft_mean: float, resolved: bool | None) -> Observation:
    po = replace(pool_obs(RATE, ready=READY, isl=ISL, osl=OSL), ttft_ms_at_sla=ttft_p95, ttft_ms_mean=ttft_mean,
                 ttft_p95_resolved=resolved)
    return Observation(0.0, 60.0, {"prefill": po, "decode": pool_obs(RATE, ready=2, isl=ISL, osl=OSL)})


def test_the_predicted_mean_is_below_the_predicted_percentile() -> None:
    load = Load(RATE, ISL, OSL)
    mean, p95 = prefill_ttft_mean_ms(SPEC.model, load, READY), prefill_ttft_ms(SPEC.model, load, READY)
    assert 0 < mean < p95


@pytest.mark.parametrize("resolved,expect_moved", [(False, False), (True, True), (None, True)],
                         ids=["unresolved-uses-mean", "resolved-uses-p95", "not-assessed-uses-p95"])
def test_learns_from_the_mean_when_the_p95_is_unresolved(resolved: bool | None, expect_moved: bool) -> None:
    load = Load(RATE, ISL, OSL)
    true_mean = prefill_ttft_mean_ms(SPEC.model, load, READY)
    # The p95 read off coarse buckets says 3x the model; the exact mean says the model is right.
    wrong_p95 = 3.0 * prefill_ttft_ms(SPEC.model, load, READY)
    factors, _ = calibrate(SPEC, observed(wrong_p95, true_mean, resolved), PlannerState(), 0.0)
    assert (abs(factors.ttft - 1.0) > 0.2) is expect_moved, factors


def test_a_p99_policy_learns_from_the_p99_not_the_p95() -> None:
    # A policy at p99 compares the observed p99 with the model's p99. Reading the p95 instead (as the sources
    # once did) makes a right model look ~0.6x pessimistic and calibrates prefill down.
    p99 = spec(free_policy(sla={"ttft_ms": 1000, "itl_ms": 40, "percentile": 99}))
    load = Load(RATE, ISL, OSL)
    model_p99 = prefill_ttft_ms(p99.model, load, READY)
    model_p95 = prefill_ttft_ms(SPEC.model, load, READY)
    assert model_p95 < 0.9 * model_p99
    po = replace(pool_obs(RATE, ready=READY, isl=ISL, osl=OSL), ttft_ms_p95=model_p95, ttft_ms_at_sla=model_p99)
    obs = Observation(0.0, 60.0, {"prefill": po, "decode": pool_obs(RATE, ready=2, isl=ISL, osl=OSL)})
    factors, _ = calibrate(p99, obs, PlannerState(), 0.0)
    assert factors.ttft == pytest.approx(1.0, abs=0.02)
