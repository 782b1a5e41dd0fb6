"""decisions.csv (every controller tick, its reasons and the misses after it) and `planner backtest --scenario`
(a suite scenario replayed with every backtest output, as `planner bench seeds` replays it)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from planner.bench import scenarios, seeds
from planner.cli import run
from planner.policy_variant import PolicySource
from planner.sim.evaluate.backtest import planner_run, score_run, sim_setup
from planner.sim.evaluate.decisions_log import REASON_SEP, decision_rows, write_decisions
from planner.types import Reason

VALID = {r.value for r in Reason}


@pytest.fixture(scope="module")
def replayed() -> tuple:
    """The planner on five minutes of the long-context mix after a four-minute warm-up (seed 2)."""
    s = scenarios.pick(["long-lognormal"])[0]
    policy = scenarios.scenario_policy()
    trace = scenarios.synthetic("lognormal", 360.0, 540.0, seed=2)
    ctx, config = sim_setup(trace, scenarios.scenario_profile(s, policy), policy, warmup_s=240.0)
    summary, rep = score_run(planner_run(ctx, None, policy), ctx, config)
    return policy, summary, rep


def test_a_row_per_tick_with_valid_reasons_and_the_decisions_sizes(replayed: tuple) -> None:
    policy, _, rep = replayed
    rows = decision_rows(rep, policy.sla.ttft_ms, policy.sla.itl_ms)
    assert len(rows) == len(rep.decisions) > 10
    assert [r["t_s"] for r in rows] == sorted(r["t_s"] for r in rows)
    for row, d in zip(rows, rep.decisions, strict=True):
        assert row["prefill.replicas"] == d.pools["prefill"].replicas and row["decode.replicas"] == d.pools["decode"].replicas
        assert row["scored"] == int(d.at_s >= 240.0)
        for key in ("reasons", "prefill.reasons", "decode.reasons"):
            codes = str(row[key]).split(REASON_SEP)
            assert set(codes) <= VALID, codes
        assert row.get("headroom_quantile") == d.detail.get("headroom_quantile")


def test_the_misses_after_each_tick_add_up_to_the_scored_window(replayed: tuple) -> None:
    """Each request counted once, under the last tick before it arrived; the scored ticks' misses are the
    summary's (every scored request arrives after the first scored tick here: warm-up ends on a tick)."""
    policy, summary, rep = replayed
    rows = decision_rows(rep, policy.sla.ttft_ms, policy.sla.itl_ms)
    first = rows[0]["t_s"]
    arrival = rep.results["arrival_s"]
    assert sum(int(r["arrived"]) for r in rows) == int(np.sum(arrival >= first))
    scored = [r for r in rows if r["scored"]]
    n = sum(int(r["arrived"]) for r in scored)
    assert n == summary["requests"]
    missed = sum(int(r["missed"]) for r in scored)
    assert missed == pytest.approx(n * (1.0 - summary["attainment_joint"]), abs=1.0)
    assert all(int(r["missed"]) <= int(r["ttft_missed"]) + int(r["itl_missed"]) for r in rows)
    assert all(max(int(r["ttft_missed"]), int(r["itl_missed"])) <= int(r["missed"]) <= int(r["arrived"]) for r in rows)
    assert sum(int(r["ttft_missed"]) for r in scored) == round(n * (1.0 - summary["attainment_ttft"]))


def test_the_csv_keeps_every_policy_and_column(replayed: tuple, tmp_path: Path) -> None:
    policy, _, rep = replayed
    path = write_decisions({"planner": rep, "again": rep}, policy.sla.ttft_ms, policy.sla.itl_ms, tmp_path)
    with path.open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 2 * len(rep.decisions)
    assert {r["policy"] for r in table} == {"planner", "again"}
    assert {"t_s", "prefill.desired", "arrived", "ttft_missed", "missed", "rate_rps", "scale_down_rules"} <= set(table[0])


def test_backtest_scenario_replays_a_seed_as_bench_seeds_does(tmp_path: Path) -> None:
    """`planner backtest --scenario NAME --seed K`: the planner's run is the one `planner bench seeds` scores for
    that seed (same trace, profile, warm-up, policy), now with report.json, timeline.csv and decisions.csv."""
    import json

    out = tmp_path / "bt"
    assert run(["backtest", "--scenario", "long-lognormal", "--seed", "1", "--baselines", "", "--no-plots",
                "--offline-simulations", "0", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    seeds._init({"example": PolicySource(None)}, None)
    expected = seeds._one(("example", "long-lognormal", 1))
    planner = report["policies"]["planner"]
    assert planner["attainment_joint"] == pytest.approx(expected.attainment_joint, abs=1e-9)
    assert planner["gpu_hours"] == pytest.approx(expected.gpu_hours, rel=1e-6)
    assert report["trace"]["warmup_s"] == 600.0
    with (out / "decisions.csv").open() as fh:
        ticks = [r for r in csv.DictReader(fh) if r["policy"] == "planner"]
    assert len(ticks) > 100 and any(r["scale_down_rules"] == "steady" for r in ticks)


@pytest.mark.parametrize(("argv", "shown"), [
    (["--scenario", "nope"], "--scenario: unknown nope; allowed: azure-conv"),
    (["--scenario", "chat-docs", "--trace", "x.csv"], "--trace: not with --scenario"),
    (["--scenario", "chat-docs", "--profile", "p.json"], "--profile: not with --scenario"),
    (["--scenario", "chat-docs", "--warmup-s", "60"], "--warmup-s: not with --scenario"),
    (["--scenario", "chat-docs", "--baselines", "static-yesterday"], "--baselines: static-yesterday needs a previous"),
    ([], "--trace: required (or --scenario NAME"),
], ids=["unknown", "with-trace", "with-profile", "with-warmup", "no-yesterday", "neither"])
def test_backtest_scenario_bad_input_is_one_line_and_exit_2(argv: list[str], shown: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run(["backtest", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert shown in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
