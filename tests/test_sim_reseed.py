"""A frontier point that beats the offline schedule seeds one more search; the reference then holds.

The yardstick is weakened on purpose (its GPU-hours inflated in a copy of the report, as a search that
stopped early would leave them), so that points beat it on this small trace."""

from __future__ import annotations

import dataclasses
import math

import pytest

from planner.sim.evaluate.backtest import BacktestResult, dominates
from planner.sim.evaluate.frontier import assemble, frontier_points, knobs
from planner.sim.evaluate.reseed import frontier_reseeded, point_name, reseed_offline
from tests import test_sim_frontier

backtest = test_sim_frontier.backtest  # the example policy on an 8-minute wave, every sweepable baseline
policy_file = test_sim_frontier.policy_file


def _weakened(result: BacktestResult, factor: float) -> BacktestResult:
    report = dict(result.report)
    off = dict(report["references"]["offline"])
    off["gpu_hours"] *= factor
    report["references"] = {**report["references"], "offline": off}
    return dataclasses.replace(result, report=report)


@pytest.fixture(scope="module")
def swept(backtest: BacktestResult) -> tuple[dict, dict]:
    return frontier_points(backtest, quick=True, workers=2)


def test_the_new_schedule_meets_the_target_below_every_seed_and_static_follows_it(backtest, swept) -> None:
    weak = _weakened(backtest, 3.0)
    knob_set, points = swept
    dominating = assemble(weak.report, knob_set, points)["points_dominating_offline"]
    assert dominating  # the weakened yardstick is beaten
    better = reseed_offline(weak, knob_set, dominating, None, max_simulations=4, workers=1)
    assert better is not None
    off = better.report["references"]["offline"]
    assert off["attainment_joint"] >= off["target_attainment"]
    assert off["gpu_hours"] <= min(p["gpu_hours"] for p in dominating) + 1e-9
    assert off["seeded_from"] in {point_name(p) for p in dominating}
    assert better.context.schedule is not None and better.replays["offline"] is better.context.schedule.replay
    # static holds the new schedule's peak, replayed again; the others are the backtest's own
    peak = better.context.schedule.peak(better.context.warmup_s)
    assert better.report["policies"]["static"]["peak_replicas"] == peak
    assert better.report["policies"]["planner"] == backtest.report["policies"]["planner"]
    assert not better.report["checks"]["policies_dominating_offline"]
    assert better.report["references"]["lower_bound"] == backtest.report["references"]["lower_bound"]


def test_nothing_cheaper_leaves_the_reference_alone(backtest, swept) -> None:
    knob_set, points = swept
    planner_point = next(p for p in assemble(backtest.report, knob_set, points)["policies"]["planner"]["points"]
                         if p["value"] == knob_set["planner"].default)
    strong = _weakened(backtest, 1e-6)  # a reference nothing can undercut
    assert reseed_offline(strong, knob_set, [{"policy": "planner", **planner_point}], None, 2) is None


def test_the_frontier_after_reseeding_has_no_point_above_the_reference(backtest) -> None:
    weak = _weakened(backtest, 3.0)
    front, better = frontier_reseeded(weak, quick=True, workers=2, max_simulations=4)
    assert front["reseeded_from"] and front["points_dominating_offline"] == []
    off = better.report["references"]["offline"]
    assert front["references"]["offline"]["gpu_hours"] == off["gpu_hours"] < weak.report["references"]["offline"]["gpu_hours"]
    for entry in front["policies"].values():
        assert not any(dominates(p, off) for p in entry["points"])
    # static's points are multiples of the new peak: replayed again, not kept from the weak schedule
    static_values = knobs(better.context.policy, quick=True)["static"].values
    assert [p["value"] for p in front["policies"]["static"]["points"]] == list(static_values)
    assert all(math.isfinite(p["gpu_hours"]) for p in front["policies"]["static"]["points"])


def test_a_sound_reference_is_not_searched_again(backtest) -> None:
    front, same = frontier_reseeded(backtest, quick=True, workers=2, max_simulations=4)
    assert same is backtest and "reseeded_from" not in front
