"""decide(): table-driven cases with ids, each checked as a whole Decision (replicas, reasons, GPUs)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from planner.config import Policy
from planner.decide import PlannerState, decide
from planner.decide.state import Calibrated, PoolMemory
from planner.types import LoadForecast, NoData, NoDataReason, Observation, Reason
from tests.support.decide_support import (
    assert_decision,
    free_policy,
    load_forecast,
    observation,
    policy,
    spec,
)

R = Reason
SLA = R.SLA_CAPACITY


@dataclass
class Case:
    id: str
    policy: Policy
    observation: Observation | NoData
    forecast: LoadForecast | None
    expected: dict[str, tuple[int, set[Reason]]]
    gpus: int | None = None
    state: PlannerState | None = None
    now_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def held(prefill: int, decode: int) -> PlannerState:
    """A state that has asked for these sizes for a while (its stabilisation window remembers them)."""
    return PlannerState(at_s=-30.0, pools={
        "prefill": PoolMemory(target=prefill, recommendations=((-30.0, prefill),)),
        "decode": PoolMemory(target=decode, recommendations=((-30.0, decode),)),
    })


FREE = free_policy()
CASES = [
    # Sizing from the SLA model: 50 req/s of 1,155/211-token chat needs 8 prefill GPUs (TTFT p95 with M/G/c
    # queueing) and 2 decode replicas of TP2 (Little: ~370 sequences in flight, <= ~300 per replica at 40 ms).
    Case("moderate-load", FREE, observation(0, 50), load_forecast(50), {"prefill": (8, {SLA}), "decode": (2, {SLA})}, 12),
    Case("peak-load", FREE, observation(0, 800), load_forecast(800), {"prefill": (121, {SLA}), "decode": (22, {SLA})},
         165),
    Case("zero-traffic-goes-to-floors", FREE, observation(0, 0), load_forecast(0),
         {"prefill": (1, {R.ZERO_TRAFFIC, R.FLOOR}), "decode": (1, {R.ZERO_TRAFFIC, R.FLOOR})}, 3,
         state=held(10, 5)),
    Case("floors", free_policy(pools={"prefill": {"min_replicas": 3}, "decode": {"min_replicas": 2}}),
         observation(0, 5), load_forecast(5), {"prefill": (3, {SLA, R.FLOOR}), "decode": (2, {SLA, R.FLOOR})}, 7),
    Case("ceiling", free_policy(pools={"prefill": {"max_replicas": 8}}), observation(0, 100), load_forecast(100),
         {"prefill": (8, {SLA, R.CEILING}), "decode": (3, {SLA})}, 14),
    Case("budget-split", free_policy(budget={"max_gpus": 20}), observation(0, 100), load_forecast(100),
         {"prefill": (14, {SLA, R.BUDGET}), "decode": (3, {SLA})}, 20),
    Case("forecast-failed-uses-observed-rate", FREE, observation(0, 50), load_forecast(0, ok=False),
         {"prefill": (8, {SLA, R.FORECAST_FALLBACK}), "decode": (2, {SLA, R.FORECAST_FALLBACK})}, 12),
    Case("ttft-infeasible", free_policy(sla={"ttft_ms": 100}), observation(0, 50), load_forecast(50),
         # infeasible: the pool where queueing adds nothing at p95 (Erlang C <= 5 %, checked by hand: 13)
         {"prefill": (13, {SLA, R.SLA_INFEASIBLE}), "decode": (2, {SLA})}),
    Case("itl-infeasible", free_policy(sla={"itl_ms": 5}), observation(0, 50), load_forecast(50),
         {"prefill": (8, {SLA}), "decode": (167, {SLA, R.SLA_INFEASIBLE})}),
    # 30k-token prompts: each chunk attends to the prompt's prefix (EngineModel.prefill_s), 38 replicas
    Case("long-context-kv-bound", FREE, observation(0, 5), load_forecast(5, isl=30000, osl=2000),
         {"prefill": (38, {SLA, R.SLA_INFEASIBLE}), "decode": (18, {SLA, R.KV_BOUND})}),
    Case("no-data-holds", FREE, NoData(NoDataReason.TIMEOUT, "prometheus timed out", 0.0), None,
         {"prefill": (6, {R.NO_DATA_HOLD}), "decode": (4, {R.NO_DATA_HOLD})}, state=held(6, 4)),
    Case("stale-observation-holds", FREE, observation(-1000, 0), load_forecast(0),
         {"prefill": (6, {R.NO_DATA_HOLD}), "decode": (4, {R.NO_DATA_HOLD})}, state=held(6, 4)),
    # Decode metrics missing: prefill follows the (lower) load, decode may not scale down on missing data.
    Case("decode-pool-missing-no-scale-down", FREE, observation(0, 5, pools=("prefill",)), load_forecast(5),
         {"prefill": (2, {SLA}), "decode": (4, {SLA, R.NO_DATA_HOLD})}, state=held(6, 4)),
    Case("decode-pool-missing-may-scale-up", FREE, observation(0, 100, pools=("prefill",)), load_forecast(100),
         {"prefill": (16, {SLA}), "decode": (3, {SLA})}, state=held(6, 1)),
    # Someone scaled prefill to 20 by hand: adopted as current, and the way down obeys the scale-down rules.
    Case("external-scale-up-adopted", policy(pools={"prefill": {"max_replicas": 100}}),
         observation(0, 50, ready={"prefill": 20, "decode": 2}), load_forecast(50),
         {"prefill": (19, {SLA, R.SCALE_DOWN_LIMIT}), "decode": (2, {SLA})}, state=held(8, 2)),
    Case("scale-up-rate-limited", policy(pools={"prefill": {"max_replicas": 100}}), observation(0, 100),
         load_forecast(100), {"prefill": (4, {SLA, R.SCALE_UP_LIMIT}), "decode": (3, {SLA})}, state=held(2, 3)),
    Case("scale-down-stabilised", policy(), observation(0, 5), load_forecast(5),
         {"prefill": (6, {SLA, R.SCALE_DOWN_STABILIZED}), "decode": (4, {SLA, R.SCALE_DOWN_STABILIZED})},
         state=held(6, 4)),
    Case("within-tolerance", free_policy(behavior={"tolerance": 0.2}), observation(0, 50), load_forecast(50),
         {"prefill": (9, {SLA, R.WITHIN_TOLERANCE}), "decode": (2, {SLA})}, state=held(9, 2)),
    # Observed TTFT 3x what the profile predicts at the observed load: factor 2 (bounded), more prefill.
    Case("calibrated-up", FREE, observation(0, 50, ready={"prefill": 8, "decode": 2}, ttft_ms_at_sla=2500.0),
         load_forecast(50), {"prefill": (13, {SLA, R.CALIBRATED_UP}), "decode": (2, {SLA})},
         state=PlannerState(calibration={"ttft": Calibrated(2.0, 0.0, 3)})),
    # Observed ITL half the profile's at the observed batch: bigger batches meet 40 ms, fewer decode replicas.
    Case("calibrated-down", FREE, observation(0, 200, ready={"prefill": 30, "decode": 6}, itl_ms_at_sla=10.0,
                                              running=1000),
         load_forecast(200), {"prefill": (31, {SLA}), "decode": (3, {SLA, R.CALIBRATED_DOWN})},
         state=PlannerState(calibration={"itl": Calibrated(0.5, 0.0, 3)})),
    Case("aggregated-one-pool", free_policy(mode="aggregated", pools={"aggregated": {"max_replicas": 100}}),
         observation(0, 50, pools=("aggregated",)), load_forecast(50), {"aggregated": (7, {SLA})}, 14),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decision(case: Case) -> None:
    decision, state = decide(spec(case.policy), case.observation, case.forecast, case.state, case.now_s)
    assert_decision(decision, case.expected, case.gpus)
    assert decision.at_s == case.now_s
    for name, pool in decision.pools.items():
        assert state.pool(name).target == pool.replicas  # the state remembers what was decided
    # The state is serialisable and round-trips exactly.
    assert PlannerState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_predictions_meet_the_sla_when_sized_freely() -> None:
    d, _ = decide(spec(FREE), observation(0, 300), load_forecast(300), None, 0.0)
    assert d.predicted_ttft_ms is not None and d.predicted_ttft_ms <= FREE.sla.ttft_ms
    assert d.predicted_itl_ms is not None and d.predicted_itl_ms <= FREE.sla.itl_ms
    # One replica fewer in either pool must predict a miss: the sizes are the smallest that meet the SLA.
    from planner.decide.capacity import Load, decode_itl_ms, prefill_ttft_ms
    from planner.decide.queueing import MAX_UTILISATION

    m = spec(FREE).model
    load = Load(300, 1155, 211)
    smaller = d.pools["prefill"].replicas - 1
    hot = 300 * m.engine.prefill_s(1155) / smaller >= MAX_UTILISATION  # never sized hotter than this
    assert hot or prefill_ttft_ms(m, load, smaller) > FREE.sla.ttft_ms
    assert decode_itl_ms(m, load, d.pools["decode"].replicas - 1) > FREE.sla.itl_ms


def test_negative_forecast_is_treated_as_zero() -> None:
    d, _ = decide(spec(FREE), observation(0, 0), load_forecast(-5.0), None, 0.0)
    assert d.targets() == {"prefill": 1, "decode": 1}
    assert Reason.ZERO_TRAFFIC in d.reasons


def test_calibration_learns_from_the_observed_window() -> None:
    obs = observation(0, 50, ready={"prefill": 8, "decode": 2}, ttft_ms_at_sla=5000.0)
    _, state = decide(spec(FREE), obs, load_forecast(50), None, 0.0)
    f = state.factor("ttft")
    assert f.samples == 1 and 1.0 < f.factor <= FREE.calibration.max_factor
    # ... and forgets it with the half-life when no new evidence comes.
    from planner.decide import calibration as cal

    later = cal.current(f, FREE.calibration.half_life_s, FREE.calibration)
    assert math.isclose(math.log(later), math.log(f.factor) / 2, rel_tol=1e-9)


def test_zero_measured_traffic_is_not_no_data() -> None:
    """Zero requests measured is a real zero (may scale to floors), unlike NoData (hold)."""
    state = held(6, 4)
    zero, _ = decide(spec(FREE), observation(0, 0), load_forecast(0), state, 0.0)
    nodata, _ = decide(spec(FREE), NoData(NoDataReason.NAN, "NaN", 0.0), None, state, 0.0)
    assert zero.targets() == {"prefill": 1, "decode": 1}
    assert nodata.targets() == {"prefill": 6, "decode": 4}


def test_no_data_on_the_first_tick_leaves_the_pools_alone() -> None:
    """Nothing known about the sizes: the Decision omits the pools (the actuator leaves them as they are)."""
    d, state = decide(spec(FREE), NoData(NoDataReason.UNREACHABLE, "down", 0.0), None, None, 0.0)
    assert d.targets() == {} and d.reasons == (R.NO_DATA_HOLD,)
    assert state.pools == {}
    # Once an observation says how many replicas are ready, a hold (here: stale data) holds those.
    d2, _ = decide(spec(FREE), observation(-1000, 10, ready={"prefill": 7, "decode": 3}), None, None, 0.0)
    assert d2.targets() == {"prefill": 7, "decode": 3} and d2.reasons == (R.NO_DATA_HOLD,)
