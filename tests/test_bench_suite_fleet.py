"""The suite's fleet scenarios (planner/bench/suite_fleet.py): which names the suite knows, issue 30's targets
as the suite judges them, bad input, and the quick fleet run inside the suite against `planner bench fleet`'s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.bench import scenarios, suite_fleet
from planner.cli import run
from planner.errors import UserError


@pytest.mark.parametrize(("selected", "backtests", "fleets"), [
    (None, list(scenarios.default_names()), ["fleet", "fleet-day"]),
    (["clumped-long"], ["clumped-long"], []),
    (["fleet"], [], ["fleet"]),
    (["fleet-day", "azure-conv"], ["azure-conv"], ["fleet-day"]),
    (["long-lognormal"], ["long-lognormal"], []),
], ids=["all", "a-named-only-scenario", "a-fleet-alone", "a-fleet-and-a-backtest", "no-fleet"])
def test_split_picks_backtests_and_fleets(selected: list[str] | None, backtests: list[str], fleets: list[str]) -> None:
    chosen, picked = suite_fleet.split(selected)
    assert [s.name for s in chosen] == backtests and [f.name for f in picked] == fleets


def test_an_unknown_name_lists_every_scenario_and_fleet() -> None:
    with pytest.raises(UserError, match=r"^scenarios: unknown fleet-week; allowed: azure-conv, .*chat-docs, clumped-long, fleet, "
                                        r"fleet-day$"):
        suite_fleet.split(["fleet", "fleet-week"])


def _report(high: tuple[float, float], binding_ticks: int, failed: int, fleet_h: float, static_h: float) -> dict:
    policies = {"big-a": {"priority": 10, "attainment_joint": high[0], "sla_met": high[0] >= 0.95},
                "big-b": {"priority": 10, "attainment_joint": high[1], "sla_met": high[1] >= 0.95},
                "small": {"priority": 0, "attainment_joint": 0.5, "sla_met": False}}
    return {"fleet": {"binding_ticks": binding_ticks, "gpu_hours": fleet_h},
            "policies": policies, "comparisons": {"static_peak": {"gpu_hours": static_h}},
            "checks": {"high_priority_sla_met": all(p["sla_met"] for p in policies.values() if p["priority"] == 10),
                       "budget_binds": binding_ticks > 0, "failed_requests": failed,
                       "gpu_hours_vs_static_peak": round(fleet_h / static_h, 4)}}


@pytest.mark.parametrize(("report", "met", "said"), [
    (_report((0.96, 0.95), 40, 0, 10.0, 20.0), (True, True, True), "the budget bound on 40 ticks"),
    (_report((0.96, 0.949), 40, 0, 10.0, 20.0), (False, True, True), "big-b 94.90%"),
    (_report((0.96, 0.97), 0, 0, 10.0, 20.0), (False, True, True), "never bound, so the target was not tested"),
    (_report((0.96, 0.97), 5, 3, 10.2, 20.0), (True, False, False), "0.51x the static pools"),
], ids=["all-met", "a-priority-10-miss", "budget-never-binds", "failures-and-over-half"])
def test_fleet_targets_met_or_missed(report: dict, met: tuple[bool, bool, bool], said: str) -> None:
    targets = suite_fleet.targets(report)
    assert [t["target"] for t in targets] == ["high_priority", "no_failures", "static_peak"]
    assert tuple(t["met"] for t in targets) == met
    assert any(said in t["detail"] for t in targets)
    assert "small" not in targets[0]["detail"]  # only the top priority is judged


def test_a_fleet_without_its_traces_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(["bench", "suite", "--quick", "--scenarios", "fleet-day", "--traces", str(tmp_path),
                "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{tmp_path}/azure2023/AzureLLMInferenceTrace_conv.csv not found (scenario fleet-day)" in err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_the_fleet_runs_the_policy_it_is_given(tmp_path: Path) -> None:
    """`--policy` reaches every model of the fleet (the suite's and `planner bench fleet`'s)."""
    import yaml

    from planner.bench.fleet import bench_fleet

    doc = yaml.safe_load(scenarios.EXAMPLE_POLICY.read_text())
    doc["forecast"]["quantile"] = 0.9
    doc["profile"] = str(scenarios.REPO / "profiles/h200/qwen3-32b.json")
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(doc))
    fleet, _ = bench_fleet(quick=True, policy_path=mine)
    assert {m.policy.forecast.quantile for m in fleet.members} == {0.9}
    example, _ = bench_fleet(quick=True)
    assert {m.policy.forecast.quantile for m in example.members} == {0.85}


def test_the_suites_fleet_is_planner_bench_fleets_run(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's quick fleet is the quick `planner bench fleet` (same figures, the command that replays it in its
    report), with its table, its targets and its files."""
    monkeypatch.setenv("COLUMNS", "200")  # the table's headers whole (CI's 80 columns wrap them)
    assert run(["bench", "suite", "--quick", "--scenarios", "fleet", "--workers", "1", "--out",
                str(tmp_path / "suite")]) == 0
    shown = capsys.readouterr().out
    assert run(["bench", "fleet", "--quick", "--no-plots", "--out", str(tmp_path / "fleet")]) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "suite" / "suite.json").read_text())
    assert doc["scenarios"] == {} and doc["entries"] == [] and list(doc["fleets"]) == ["fleet"]
    mine = doc["fleets"]["fleet"]["report"]
    alone = json.loads((tmp_path / "fleet" / "report.json").read_text())
    assert mine["command"] == alone["command"] == "planner bench fleet --quick --seed 0"
    assert mine["fleet"] == alone["fleet"] and mine["checks"] == alone["checks"]
    assert {n: p["attainment_joint"] for n, p in mine["policies"].items()} == {
        n: p["attainment_joint"] for n, p in alone["policies"].items()}
    targets = doc["fleets"]["fleet"]["targets"]
    assert targets[1]["met"] is (alone["checks"]["failed_requests"] == 0)
    assert targets[2]["met"] is (alone["checks"]["gpu_hours_vs_static_peak"] <= 0.5)
    for file in ("report.json", "report.md", "fleet.png"):
        assert (tmp_path / "suite" / "fleet" / file).stat().st_size > 0
    assert "fleet: 44 GPUs shared" in shown and "<= 0.5x static pools at their peaks" in shown
    assert "cold TTFT p95 s" in shown  # the issue asks for cold starts and their TTFT
    assert "Targets (example policy as shipped)" not in shown  # no backtest scenario, no backtest tables
