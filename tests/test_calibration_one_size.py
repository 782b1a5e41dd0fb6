"""ITL calibration learns only from windows the decode pool served at one size (calibration._one_size).

A window that straddles a scale-up holds the old size's ITL while the ready gauge, read at its end, gives the new
size: compared with the new size's prediction that read as a model error (ServeGen hour 15: factor 1.03 -> 1.29
the tick decode's second replica became ready). Ticks on a fake clock; the observation window is 60 s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.decide.calibration import calibrate
from planner.decide.capacity import percentile_batch
from planner.decide.state import PlannerState, PoolMemory
from planner.types import Observation
from tests.support.decide_support import free_policy, pool_obs, spec

SPEC = spec(free_policy())
RATE, ISL, OSL, WINDOW_S = 20.0, 1000.0, 200.0, 60.0
ITL_MEAN_MS = 20.0


def observed(now_s: float, decode_ready: int, itl_over_model: float, prefill_ready: int = 4,
             ttft_ms: float | None = None) -> Observation:
    """Decode at ``decode_ready`` replicas, its ITL percentile ``itl_over_model`` x the model's at that size."""
    running = RATE * OSL * ITL_MEAN_MS / 1e3  # Little: the gauge agrees with the window's mean batch
    at = percentile_batch(SPEC.model, running, decode_ready)
    model_ms = SPEC.model.engine.decode.itl_ms(at, ISL + OSL / 2.0).value
    decode = replace(pool_obs(RATE, ready=decode_ready, isl=ISL, osl=OSL, window_s=WINDOW_S), running=running,
                     itl_ms_mean=ITL_MEAN_MS, itl_ms_at_sla=itl_over_model * model_ms)
    prefill = replace(pool_obs(RATE, ready=prefill_ready, isl=ISL, osl=OSL, window_s=WINDOW_S),
                      ttft_ms_at_sla=ttft_ms)
    return Observation(now_s, WINDOW_S, {"prefill": prefill, "decode": decode})


def ticks(*steps: tuple[float, int]) -> tuple[float, PlannerState]:
    """Every (time, decode ready) observed with the model exactly right, then the ITL factor and state."""
    state = PlannerState()
    factors = None
    for now_s, ready in steps:
        factors, state = calibrate(SPEC, observed(now_s, ready, 1.0), state, now_s)
    assert factors is not None
    return factors.itl, state


@pytest.mark.parametrize("history,now_s,ready,learns", [
    ([], 0.0, 2, True),                                     # unknown history: one size, as before
    ([(0.0, 2), (30.0, 2)], 60.0, 2, True),                 # the same size all along
    ([(0.0, 1), (30.0, 1)], 60.0, 2, False),                # the second replica became ready this tick
    ([(0.0, 1), (30.0, 2)], 60.0, 2, False),                # 30 s after: half the window is still one replica
    ([(0.0, 1), (30.0, 2), (60.0, 2)], 90.0, 2, True),      # a whole window (60 s) at two
    ([(0.0, 2), (30.0, 2)], 60.0, 1, False),                # a scale-down straddles the same way
], ids=["first-tick", "steady", "just-ready", "half-window", "whole-window", "scale-down"])
def test_itl_learns_only_from_a_window_at_one_size(history: list[tuple[float, int]], now_s: float, ready: int,
                                                   learns: bool) -> None:
    before, state = ticks(*history) if history else (1.0, PlannerState())
    factors, state = calibrate(SPEC, observed(now_s, ready, 1.5), state, now_s)
    assert before == pytest.approx(1.0, abs=1e-6)
    assert (factors.itl > 1.1) is learns, factors
    assert state.pool("decode").ready == ready


def test_prefill_keeps_learning_across_its_own_scale_up() -> None:
    # TTFT is not held to the rule (the same rule for prefill lost seeds: README); a prefill size change does
    # not stop the ITL factor either.
    state = PlannerState()
    _, state = calibrate(SPEC, observed(0.0, 2, 1.0, prefill_ready=4, ttft_ms=300.0), state, 0.0)
    factors, state = calibrate(SPEC, observed(30.0, 2, 1.5, prefill_ready=6, ttft_ms=3000.0), state, 30.0)
    assert factors.ttft > 1.1 and factors.itl > 1.1


def test_since_when_survives_a_restart() -> None:
    _, state = ticks((0.0, 1), (30.0, 2))
    assert state.pool("decode") == replace(state.pool("decode"), ready=2, ready_since_s=30.0)
    again = PlannerState.from_dict(state.to_dict())
    assert again.pool("decode").ready == 2 and again.pool("decode").ready_since_s == 30.0
    factors, _ = calibrate(SPEC, observed(60.0, 2, 1.5), again, 60.0)
    assert factors.itl == pytest.approx(1.0, abs=1e-6)  # still inside the window after the restart
    assert PoolMemory().ready is None
