"""A fleet's planners promise the SLA over the scored window, as a single backtest's planner does: the warm-up's
transient is not spent from their error budget (fleet_replay sets ``budget_since_s`` as replay() does). Before
2026-12-05 the fleet's planners read a rolling window from the start of the warm-up, so the same policy sized
differently alone and in a fleet whose budget never bound."""

from __future__ import annotations

from pathlib import Path

from planner.fleet_file import load_fleet
from planner.sim.evaluate.backtest import planner_run, score_run, sim_setup
from planner.sim.evaluate.fleet_backtest import run_fleet_backtest
from planner.sim.traces.loaders import load_requests
from planner.types import Reason
from tests.support.fleet_support import member, write_fleet

TRACE = Path(__file__).resolve().parents[1] / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
WARMUP_S = 300.0


def test_a_one_policy_fleet_whose_budget_never_binds_decides_as_its_backtest(tmp_path: Path) -> None:
    fleet = load_fleet(write_fleet(tmp_path, [member("alone", 0)], max_gpus=64))
    trace = load_requests(TRACE, "azure", rate_scale=2.0, duration_s=1200)
    m = fleet.member("alone")
    result = run_fleet_backtest(fleet, {"alone": trace}, compare=False, warmup_s=WARMUP_S)
    assert result.report["fleet"]["binding_ticks"] == 0
    in_fleet = result.shared.replays["alone"].decisions
    ctx, config = sim_setup(trace, m.profile, m.policy, warmup_s=WARMUP_S)
    _, alone = score_run(planner_run(ctx, None, m.policy), ctx, config)
    assert [(d.at_s, d.targets()) for d in in_fleet] == [(d.at_s, d.targets()) for d in alone.decisions]
    assert [d.reasons for d in in_fleet] == [d.reasons for d in alone.decisions]
    # The promise begins where scoring does: its short burn window is unmeasured for the scored window's first
    # 5 minutes (conservative), then measured.
    scored = [d for d in in_fleet if d.at_s > WARMUP_S]
    assert all(Reason.BUDGET_UNMEASURED in d.reasons for d in scored if d.at_s < WARMUP_S + 270)
    assert any(Reason.BUDGET_UNMEASURED not in d.reasons for d in scored if d.at_s >= WARMUP_S + 300)
