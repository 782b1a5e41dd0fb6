"""Frontiers: each policy's headroom knob swept on one trace; lower envelopes and where one lies above another."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from planner.cli import run
from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.evaluate.backtest import BacktestResult, run_backtest
from planner.sim.evaluate.envelope import compare, cost_at, describe, logit, pareto
from planner.sim.evaluate.frontier import (
    SweepJob,
    frontier_tasks,
    knobs,
    offline_seed_quantiles,
    run_frontier,
    sweep,
)
from planner.sim.evaluate.frontier_report import frontier_markdown, write_frontier
from planner.sim.traces.synthetic import sinusoid
from tests import test_sim_backtest

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles/h200/qwen3-32b.json"
policy_file = test_sim_backtest.policy_file  # the example policy on this profile, shared with the backtest tests
SWEPT = ("planner", "dynamo-throughput", "dynamo-load", "static", "reactive")  # the knobs' order


@pytest.fixture(scope="module")
def backtest(policy_file: Path) -> BacktestResult:
    """A tiny trace: 8 minutes of a 25 +- 15 req/s wave, the first 3 unscored."""
    tr = sinusoid(25.0, 15.0, 300.0, 480.0, isl=1000, osl=150, seed=5)
    return run_backtest(tr, load_profile(PROFILE), load_policy(policy_file), baselines=SWEPT[1:], warmup_s=180.0,
                        offline_simulations=4)


@pytest.fixture(scope="module")
def frontier(backtest: BacktestResult) -> dict:
    return run_frontier(backtest, quick=True, workers=2)


def _without_runtime(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "runtime_s"}


def test_every_policy_has_its_knob_values_in_order_with_the_backtest_run_as_its_default(
        frontier: dict, backtest: BacktestResult) -> None:
    expected = knobs(backtest.context.policy, quick=True)  # type: ignore[union-attr]
    assert list(frontier["policies"]) == list(SWEPT)
    for name, entry in frontier["policies"].items():
        assert entry["knob"] == expected[name].name
        assert [p["value"] for p in entry["points"]] == list(expected[name].values)
        default = [p for p in entry["points"] if p["default"]]
        assert len(default) == 1 and default[0]["value"] == expected[name].default
        assert _without_runtime(default[0]) == _without_runtime(
            {"knob": entry["knob"], "value": default[0]["value"], "default": True, **backtest.report["policies"][name]})
        for p in entry["points"]:
            assert p["requests"] == backtest.report["policies"]["planner"]["requests"]  # same trace, same warm-up
    assert "single_points" not in frontier  # every policy of this run has a knob
    assert frontier["references"]["offline"]["gpu_hours"] == backtest.report["references"]["offline"]["gpu_hours"]


@pytest.mark.parametrize("policy", ["planner", "static", "reactive", "dynamo-throughput"])
def test_more_headroom_never_buys_fewer_gpu_hours(frontier: dict, policy: str) -> None:
    hours = [p["gpu_hours"] for p in frontier["policies"][policy]["points"]]
    # monotone-ish: a step down of more than 3 % would mean the knob is not a headroom knob
    assert all(b >= a * 0.97 for a, b in zip(hours, hours[1:], strict=False)), hours
    assert hours[-1] > hours[0], hours


def test_parallel_and_sequential_sweeps_give_the_same_points(backtest: BacktestResult) -> None:
    ks = knobs(backtest.context.policy, quick=True)  # type: ignore[union-attr]
    job = SweepJob(backtest.context, backtest.config, None, ks)  # type: ignore[arg-type]
    tasks = frontier_tasks({k: ks[k] for k in ("planner", "dynamo-throughput")}, backtest.report["policies"])
    assert ("planner", ks["planner"].default) not in tasks  # the backtest already ran it
    seen: list[tuple[int, int]] = []
    one = sweep(job, tasks, workers=1)
    two = sweep(job, tasks, workers=2, progress=lambda done, total: seen.append((done, total)))
    assert {t: _without_runtime(e) for t, e in one.items()} == {t: _without_runtime(e) for t, e in two.items()}
    assert seen[0] == (0, len(tasks)) and seen[-1] == (len(tasks), len(tasks))


def test_files_json_figure_and_markdown(frontier: dict, tmp_path: Path) -> None:
    paths = write_frontier(frontier, tmp_path, sla_percentile=95)
    assert [p.name for p in paths] == ["frontier.json", "frontier.png"]
    assert json.loads(paths[0].read_text()) == frontier
    assert paths[1].stat().st_size > 10_000
    md = frontier_markdown(frontier)
    shipped = yaml.safe_load((REPO / "policies/example.yaml").read_text())["forecast"]["quantile"]
    assert f"| planner | quantile | **{shipped}** |" in md  # the policy's own value, in bold
    assert md.count("planner vs dynamo-") == 2


def test_cli_backtest_frontier_writes_files_and_the_report_section(tmp_path: Path, policy_file: Path) -> None:
    tr = sinusoid(20.0, 10.0, 300.0, 420.0, isl=1000, osl=150, seed=3)
    trace = tmp_path / "trace.csv"
    trace.write_text("t,isl,osl\n" + "".join(f"{t:.4f},{i},{o}\n" for t, i, o in zip(tr.arrival_s, tr.isl, tr.osl,
                                                                                      strict=True)))
    out = tmp_path / "out"
    rc = run(["backtest", "--trace", str(trace), "--format", "csv", "--columns", "arrival=t,isl=isl,osl=osl",
              "--profile", str(PROFILE), "--policy", str(policy_file), "--out", str(out), "--baselines",
              "dynamo-throughput", "--offline-simulations", "3", "--start-s", "120", "--warmup-s", "120", "--frontier",
              "--no-plots"])
    assert rc == 0
    front = json.loads((out / "frontier.json").read_text())
    assert list(front["policies"]) == ["planner", "dynamo-throughput"]
    shipped = load_policy(policy_file).forecast.quantile  # the policy's own quantile is a point too
    expected = sorted({0.5, 0.7, 0.8, 0.9, 0.95, 0.99, shipped})
    assert [p["value"] for p in front["policies"]["planner"]["points"]] == expected
    assert [c["other"] for c in front["comparisons"]] == ["dynamo-throughput"]
    assert "## Frontier" in (out / "report.md").read_text()
    assert not (out / "frontier.png").exists()  # --no-plots


# ------------------------------------------------------------------------------------------------ envelope
def _pts(*pairs: tuple[float, float]) -> list[dict]:
    return [{"gpu_hours": g, "attainment_joint": a} for g, a in pairs]


def test_pareto_keeps_only_points_nothing_beats_on_both() -> None:
    assert pareto(_pts((3.0, 0.99), (1.0, 0.9), (2.0, 0.85), (2.5, 0.99), (4.0, 0.999))) == [
        (1.0, 0.9), (2.5, 0.99), (4.0, 0.999)]


@pytest.mark.parametrize(("a", "cost"), [
    (0.5, 1.0),  # below the least-attaining point: that point's cost
    (0.9, 1.0),
    (1.0 / (1.0 + math.exp(-(logit(0.9) + logit(0.99)) / 2)), 1.5),  # half way in log-odds
    (0.99, 2.0),
    (0.995, math.inf),  # never reached
], ids=["below", "first", "log-odds-midpoint", "last", "beyond"])
def test_cost_at_interpolates_in_log_odds(a: float, cost: float) -> None:
    assert cost_at(pareto(_pts((1.0, 0.9), (2.0, 0.99))), a) == pytest.approx(cost)


def test_compare_above_everywhere() -> None:
    c = compare("planner", _pts((1.0, 0.9), (2.0, 0.999)), "dynamo", _pts((1.2, 0.9), (3.0, 0.999)))
    assert c["above_everywhere"] and c["not_above"] == [] and c["neither_reaches_from"] is None
    assert describe(c).endswith("above everywhere")


def test_compare_names_where_the_other_is_cheaper_and_where_this_one_never_reaches() -> None:
    c = compare("planner", _pts((1.0, 0.9), (2.0, 0.99)), "dynamo", _pts((0.8, 0.95), (2.5, 0.995)))
    assert not c["above_everywhere"]
    whys = [s["why"] for s in c["not_above"]]
    assert whys[0] == "dynamo needs less" and c["not_above"][0]["from"] == pytest.approx(0.9)
    assert whys[-1].startswith("planner never reaches it") and c["not_above"][-1]["to"] == pytest.approx(0.995, abs=1e-3)
    assert c["neither_reaches_from"] is not None and c["neither_reaches_from"] > 0.995
    assert "NOT above" in describe(c)


@pytest.mark.parametrize(("point", "expected"), [
    ({"gpu_hours": 9.0, "attainment_joint": 0.96}, True),  # cheaper and better
    ({"gpu_hours": 10.0, "attainment_joint": 0.97}, True),  # same spend, better: the tie counts
    ({"gpu_hours": 9.0, "attainment_joint": 0.95}, True),  # cheaper, same attainment
    ({"gpu_hours": 10.0, "attainment_joint": 0.95}, False),  # the same point
    ({"gpu_hours": 9.0, "attainment_joint": 0.94}, False),  # cheaper but worse
    ({"gpu_hours": 11.0, "attainment_joint": 0.99}, False),  # better but dearer
], ids=["both", "tie-gpu", "tie-attainment", "equal", "cheaper-worse", "better-dearer"])
def test_dominance_counts_ties_on_one_axis(point: dict, expected: bool) -> None:
    from planner.sim.evaluate.backtest import dominates, yardstick_checks

    offline = {"gpu_hours": 10.0, "attainment_joint": 0.95}
    assert dominates(point, offline) is expected
    report = {"references": {"offline": offline, "lower_bound": {"gpu_hours": 4.0}}, "policies": {"x": point}}
    assert yardstick_checks(report)["policies_dominating_offline"] == (["x"] if expected else [])


def test_frontier_points_that_beat_the_offline_schedule_are_named() -> None:
    from planner.sim.evaluate.frontier import Knob, assemble

    report = {"references": {"offline": {"gpu_hours": 10.0, "attainment_joint": 0.95},
                             "lower_bound": {"gpu_hours": 4.0}},
              "policies": {"planner": {"gpu_hours": 12.0, "attainment_joint": 0.99}}}
    knob = Knob("planner", "quantile", (0.5, 0.9), 0.9)
    points = {("planner", 0.5): {"value": 0.5, "attainment_joint": 0.96, "gpu_hours": 9.9}}
    out = assemble(report, {"planner": knob}, points)
    assert out["points_dominating_offline"] == [{"policy": "planner", "knob": "quantile", "value": 0.5,
                                                 "attainment_joint": 0.96, "gpu_hours": 9.9}]


def test_the_planners_cheaper_points_seed_the_offline_search_so_none_beats_it(policy_file: Path) -> None:
    """Without these seeds a planner point at quantile 0.5 beat the offline schedule on both axes (suite,
    chat-docs, 2026-12-01): the search only starts from what it is given."""
    policy = load_policy(policy_file)
    seeds = offline_seed_quantiles(policy, quick=True)
    assert seeds and all(q < policy.forecast.quantile for q in seeds)
    assert set(seeds) < set(knobs(policy, quick=True)["planner"].values)
    tr = sinusoid(25.0, 15.0, 300.0, 480.0, isl=1000, osl=150, seed=5)
    plain = run_backtest(tr, load_profile(PROFILE), policy, baselines=(), warmup_s=180.0, offline_simulations=4)
    seeded = run_backtest(tr, load_profile(PROFILE), policy, baselines=(), warmup_s=180.0, offline_simulations=4,
                          seed_quantiles=seeds)
    off, plain_off = seeded.report["references"]["offline"], plain.report["references"]["offline"]
    assert off["simulations"] >= plain_off["simulations"] + len(seeds) - 1  # each seed judged by a simulation
    assert off["gpu_hours"] <= plain_off["gpu_hours"] + 1e-9  # its own search: never costlier than without
    assert off["attainment_joint"] >= off["target_attainment"]
    assert list(seeded.report["policies"]) == ["planner"]  # seeds are not reported as policies
    front = run_frontier(seeded, quick=True, workers=1)
    assert front["points_dominating_offline"] == []
    assert not seeded.report["checks"]["policies_dominating_offline"]


def test_the_offline_search_also_starts_from_the_clairvoyant_planner_with_free_scale_down(policy_file: Path) -> None:
    """The planner fed the true load and allowed to give capacity back at once beat the offline schedule on
    both axes on two suite scenarios (2026-12-01), because no seed had started the search that low. It is
    now a seed with a search of its own, so it can never beat the yardstick."""
    from planner.sim.evaluate.backtest import dominates, free_clairvoyant_run, score_run
    from planner.sim.evaluate.clairvoyant import FREE_NAME, with_free_scale_down

    policy = load_policy(policy_file)
    free = with_free_scale_down(policy).behavior.scale_down
    assert free.stabilization_window_s == 0 and free.policies[0].value == 100  # the rule the seed runs under
    assert policy.behavior.scale_down.stabilization_window_s > 0  # the policy itself is left as it was
    tr = sinusoid(25.0, 15.0, 300.0, 480.0, isl=1000, osl=150, seed=5)
    result = run_backtest(tr, load_profile(PROFILE), policy, baselines=(), warmup_s=180.0, offline_simulations=4)
    off = result.report["references"]["offline"]
    assert FREE_NAME not in result.report["policies"]  # a seed, not a reported policy
    assert off["attainment_joint"] >= off["target_attainment"]
    assert result.context is not None and result.config is not None
    seed, _ = score_run(free_clairvoyant_run(result.context), result.context, result.config)
    assert seed["gpu_hours"] < result.report["policies"]["planner"]["gpu_hours"]  # the cheap start it exists for
    assert not dominates(seed, off)
    assert off["simulations"] >= 3 * 1  # a search per group: reported runs, quantile seeds (none here), free seed


@pytest.mark.parametrize("q, lean", [(0.5, 0.5), (0.7, 0.6), (0.85, 0.75), (0.99, 0.89)])
def test_the_quantile_knob_moves_the_lean_quantile_with_it(q: float, lean: float) -> None:
    """As shipped the error budget is spent (lean 0.75 under 0.85): each frontier point keeps that gap, so a
    point with more headroom is not capped at the shipped lean quantile while the budget is healthy."""
    from planner.policy_file import load_policy
    from planner.sim.evaluate.backtest import with_quantile
    from tests.support.decide_support import EXAMPLE, HEDGE

    shipped = load_policy(EXAMPLE)
    moved = with_quantile(shipped, q)
    assert moved.forecast.quantile == q and moved.sla.lean_quantile == pytest.approx(lean)
    assert moved.sla.lean_quantile <= moved.forecast.quantile
    hedge = with_quantile(load_policy(HEDGE), q)  # budget off: the lean quantile is not read, and not moved
    assert hedge.forecast.quantile == q and hedge.sla.lean_quantile == load_policy(HEDGE).sla.lean_quantile
