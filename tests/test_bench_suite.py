"""`planner bench suite`: the scenarios, their synthetic traces against the facts they model, the targets, bad
input, and the quick suite end to end."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from planner.bench import scenarios
from planner.bench.scenarios import default_traces_dir
from planner.cli import run
from planner.sim.cluster.cluster import SimConfig
from planner.sim.evaluate.backtest import check_trace

TRACES = default_traces_dir()
POLICY_FIELDS = {"requests", "attainment_ttft", "attainment_itl", "attainment_joint", "ttft_ms", "itl_ms", "gpu_hours",
                 "scale_events", "direction_changes_per_hour", "failed_requests", "peak_replicas"}


@pytest.mark.parametrize(("argv", "shown"), [
    (["--scenarios", "azure-conv,nope"], "--scenarios: unknown nope; allowed: azure-conv, azure-code"),
    (["--scenarios", "fleet,nope"], "chat-docs, clumped-long, fleet, fleet-day"),
    (["--traces", "{tmp}"], "/azure2023/AzureLLMInferenceTrace_conv.csv not found (scenario azure-conv)"),
    (["--traces", "{tmp}/missing"], "--traces: {tmp}/missing is not a folder"),
    (["--workers", "0"], "--workers: 0 must be >= 1"),
    (["--policy", "{tmp}/nope.yaml"], "{tmp}/nope.yaml: policy file not found"),
], ids=["unknown-scenario", "unknown-beside-a-fleet", "traces-missing", "traces-not-a-folder", "workers", "policy-missing"])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], shown: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert run(["bench", "suite", "--quick", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert shown.replace("{tmp}", str(tmp_path)) in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()  # nothing ran


def test_a_traces_folder_without_a_scenario_file_names_the_file(tmp_path: Path) -> None:
    from planner.errors import UserError

    with pytest.raises(UserError, match=r"^traces: .*azure2023/AzureLLMInferenceTrace_conv.csv not found "
                                        r"\(scenario azure-conv\)"):
        scenarios.check_traces(scenarios.pick(["azure-conv", "long-lognormal"]), tmp_path)
    scenarios.check_traces(scenarios.pick(["long-lognormal", "chat-docs"]), tmp_path)  # synthetic: no traces needed


def test_every_scenario_trace_ships_in_the_repository() -> None:
    assert TRACES == Path(__file__).resolve().parent.parent / "profiles" / "traces"
    scenarios.check_traces(scenarios.pick(None), None)  # the default folder holds every file


@pytest.mark.parametrize(("mix", "isl_mean", "isl_p99"), [
    ("lognormal", 12_000, 85_000),  # the heavy tail
    ("chat-docs", 0.8 * 1_000 + 0.2 * 32_000, None),
], ids=["lognormal", "chat-docs"])
def test_synthetic_lengths_match_what_they_model(mix: str, isl_mean: float, isl_p99: float | None) -> None:
    tr = scenarios.synthetic(mix, 0.0, 3600.0)
    assert float(tr.isl.mean()) == pytest.approx(isl_mean, rel=0.05)
    if isl_p99:
        assert float(np.percentile(tr.isl, 99)) == pytest.approx(isl_p99, rel=0.08)
    else:  # every document is >= 4k tokens, ~2 % of chat prompts are
        assert 0.19 <= float(np.mean(tr.isl >= 4000)) <= 0.24
    # the wave's mean rate, plus whatever share of the four 3-minute +60 % bursts falls in the hour
    assert 1.0 <= len(tr) / 3600.0 / scenarios.MIX_RATE_RPS[mix] <= 1.15
    per_min = np.bincount((tr.arrival_s // 60).astype(int))
    assert per_min.max() / per_min.mean() > 1.4  # waves and bursts, not a flat rate


def test_long_context_profile_takes_every_synthetic_request() -> None:
    prof = scenarios.scenario_profile(scenarios.pick(["long-lognormal"])[0], scenarios.scenario_policy())
    assert prof.model.max_context_tokens == 131072 and prof.selected_tp("prefill") == 8
    for mix in ("lognormal", "chat-docs"):
        check_trace(scenarios.synthetic(mix, 0.0, 600.0), prof, SimConfig())  # raises if one does not fit


def test_clumped_trace_matches_the_held_out_statistics_it_models() -> None:
    """The stand-in's facts (the held-out trace's published statistics): prompts median 6.9k, mean 12k, p95 ~39k;
    outputs mean 343; a flat 34 req/s in clumps of ~10 at one instant (1-s index of dispersion ~10.7)."""
    from planner.sim.traces.records import arrival_dispersion

    tr = scenarios.synthetic("clumped", 0.0, 3600.0)
    assert float(np.median(tr.isl)) == pytest.approx(6_900, rel=0.05)
    assert float(tr.isl.mean()) == pytest.approx(12_000, rel=0.05)
    assert float(np.percentile(tr.isl, 95)) == pytest.approx(39_000, rel=0.08)
    assert float(tr.osl.mean()) == pytest.approx(343, rel=0.05)
    assert len(tr) / 3600.0 == pytest.approx(34.0, rel=0.03)
    assert len(np.unique(tr.arrival_s)) / len(tr) == pytest.approx(0.1, rel=0.05)  # ten requests an instant
    assert arrival_dispersion(tr.arrival_s) == pytest.approx(10.9, rel=0.15)  # Poisson: 1
    per_min = np.bincount((tr.arrival_s // 60).astype(int))
    assert per_min.max() / per_min.mean() < 1.25  # flat: no waves, no bursts
    assert scenarios.synthetic("clumped", 0.0, 600.0, seed=1).arrival_s[:5].tolist() != tr.arrival_s[:5].tolist()


def test_clumped_scenario_runs_the_held_out_case_sla_on_prefill_tp2_decode_tp4() -> None:
    """Its own SLA and ceilings set on whatever policy runs it (the example here), and at that SLA the 64k-token
    selection picks the TPs the held-out case ran; the other scenarios run the policy as it is."""
    s = scenarios.pick(["clumped-long"])[0]
    policy = scenarios.policy_for(s, scenarios.scenario_policy())
    assert (policy.sla.ttft_ms, policy.sla.itl_ms, policy.sla.percentile) == (3000.0, 50.0, 95.0)
    assert policy.pools.prefill is not None and policy.pools.decode is not None
    assert (policy.pools.prefill.max_replicas, policy.pools.decode.max_replicas) == (64, 64)
    prof = scenarios.scenario_profile(s, policy)
    assert prof.model.name.lower().startswith("llama-3.1-8b")
    assert (prof.selected_tp("prefill"), prof.selected_tp("decode")) == (2, 4)
    check_trace(scenarios.synthetic("clumped", 0.0, 600.0), prof, SimConfig())
    example = scenarios.scenario_policy()
    assert scenarios.policy_for(scenarios.pick(["azure-conv"])[0], example) == example
    assert "clumped-long" not in scenarios.default_names() and "clumped-long" in scenarios.names()


def _report(planner: tuple[float, float], perfect: tuple[float, float], static_h: float = 20.0,
            yesterday_h: float | None = None) -> dict:
    def entry(a: float, g: float) -> dict:
        return {"attainment_joint": a, "gpu_hours": g}
    policies = {"planner": entry(*planner), "planner+perfect-forecast": entry(*perfect), "static": entry(0.999, static_h)}
    if yesterday_h is not None:
        policies["static-yesterday"] = entry(0.999, yesterday_h)
    return {"references": {"offline": entry(0.955, 10.0), "lower_bound": {"gpu_hours": 5.0}},
            "sla": {"percentile": 95.0}, "policies": policies}


FRONTIER_ABOVE = {"comparisons": [{"policy": "planner", "other": o, "range": [0.9, 0.999], "above_everywhere": True,
                                   "not_above": [], "neither_reaches_from": None}
                                  for o in ("dynamo-throughput", "dynamo-load")]}


@pytest.mark.parametrize(("planner", "perfect", "met"), [
    ((0.95, 11.0), (0.95, 10.5), (True, True)),  # at the lines: the SLA's 95 % at 1.10x and 1.05x
    ((0.949, 10.0), (0.95, 10.6), (False, False)),  # under the SLA's percentile; over 1.05x
    ((0.999, 11.1), (0.995, 9.0), (False, True)),  # over 1.10x
], ids=["at-the-lines", "attainment-and-perfect-ratio", "planner-ratio"])
def test_targets_met_or_missed(planner: tuple[float, float], perfect: tuple[float, float],
                               met: tuple[bool, bool]) -> None:
    frontier = copy.deepcopy(FRONTIER_ABOVE)
    got = {t["target"]: t["met"] for t in scenarios.targets(_report(planner, perfect), frontier)}
    assert got == {"planner": met[0], "perfect_forecast": met[1], "static": True, "frontier": True}
    frontier["comparisons"] = frontier["comparisons"][:1]  # one Dynamo mode is not both
    assert not scenarios.targets(_report(planner, perfect), frontier)[-1]["met"]


@pytest.mark.parametrize(("static_h", "yesterday_h", "met_static", "met_yesterday"), [
    (11.0, 11.0 / 0.6, True, True),  # at the lines: no more than static, 0.6x static-yesterday
    (10.9, 30.0, False, True),  # more than the known peak
    (20.0, 18.0, True, False),  # 0.61x static-yesterday
], ids=["at-the-lines", "over-static", "over-yesterday"])
def test_static_and_static_yesterday_targets(static_h: float, yesterday_h: float, met_static: bool,
                                             met_yesterday: bool) -> None:
    got = {t["target"]: t for t in scenarios.targets(_report((0.96, 11.0), (0.96, 10.0), static_h, yesterday_h),
                                                     FRONTIER_ABOVE)}
    assert (got["static"]["met"], got["static_yesterday"]["met"]) == (met_static, met_yesterday)
    assert "static-yesterday's" in got["static_yesterday"]["detail"]
    # static-yesterday is judged only where the scenario has a yesterday
    assert "static_yesterday" not in {t["target"] for t in scenarios.targets(_report((0.96, 11.0), (0.96, 10.0)),
                                                                            FRONTIER_ABOVE)}


POLICIES = ["planner", "static", "reactive", "dynamo-throughput", "dynamo-load", "planner+perfect-forecast",
            "offline schedule"]


def _check_suite(out: Path, names: list[str], shown: str, fleets: tuple[str, ...] = ()) -> dict:
    """What every suite run must write and print, whatever its scenarios (and fleets: tests/test_bench_suite_fleet.py
    checks what each holds)."""
    doc = json.loads((out / "suite.json").read_text())
    assert doc["quick"] is True and doc["planner_version"] and doc["date"] and doc["wall_s"] > 0
    assert doc["cpu_s"]["total"] > 0 and set(doc["cpu_s"]["per_scenario"]) == {*names, *fleets}
    assert list(doc["scenarios"]) == names and list(doc["fleets"]) == list(fleets)
    for name in fleets:
        assert [t["target"] for t in doc["fleets"][name]["targets"]] == ["high_priority", "no_failures", "static_peak"]
        assert (out / name / "fleet.png").stat().st_size > 10_000 and (out / name / "report.json").is_file()
    with_yesterday = {s.name for s in scenarios.pick(names) if s.yesterday}
    assert sorted((r["scenario"], r["policy"]) for r in doc["entries"]) == sorted(
        [(s, p) for s in names for p in POLICIES] + [(s, "static-yesterday") for s in with_yesterday])
    for r in doc["entries"]:
        assert POLICY_FIELDS <= set(r) and r["quick"] is True and r["scored_requests"] == r["requests"]
        assert r["gpu_hours_vs_lower_bound"] >= 1.0 - 1e-9  # nothing spends less than the strict bound
    for name, sc in doc["scenarios"].items():
        assert [t["target"] for t in sc["targets"]] == ["planner", "perfect_forecast", "static",
                                                        *(["static_yesterday"] if name in with_yesterday else []),
                                                        "frontier"]
        assert list(sc["frontier"]["policies"]) == ["planner", "dynamo-throughput", "dynamo-load"]
        assert sc["report"]["checks"]["lower_bound_le_offline"] is True
        assert (out / name / "frontier.png").stat().st_size > 10_000
        assert "## Frontier" in (out / name / "report.md").read_text()
        # report.md points at the per-interval records: they are there, one set per policy scored (the offline
        # schedule's left out: the suite may search it again after its replay)
        with (out / name / "decisions.csv").open() as fh:
            ticked = {r["policy"] for r in csv.DictReader(fh)}
        with (out / name / "timeline.csv").open() as fh:
            sampled = {r["policy"] for r in csv.DictReader(fh)}
        policies = set(sc["report"]["policies"])
        assert "planner" in ticked and ticked <= policies and sampled == policies
    assert all(n in shown for n in names) and "wall time:" in shown and "Targets" in shown
    return doc


def test_quick_suite_on_one_synthetic_scenario_under_another_policy(tmp_path: Path, capsys) -> None:
    """The suite end to end on the heavy-tailed synthetic scenario (no shared traces needed, so CI always runs
    it): a backtest with both references, the frontier points on the worker processes, the files. It runs
    under --policy (capacity planners comparing theirs): the planner follows that policy, and suite.json and
    the targets table name it instead of claiming the example as shipped."""
    import yaml

    doc = yaml.safe_load(scenarios.EXAMPLE_POLICY.read_text())
    doc["forecast"]["quantile"] = 0.95
    doc["profile"] = str(scenarios.REPO / "profiles/h200/qwen3-32b.json")
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(doc))
    out = tmp_path / "suite"
    assert run(["bench", "suite", "--quick", "--scenarios", "long-lognormal", "--workers", "2", "--policy", str(mine),
                "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    result = _check_suite(out, ["long-lognormal"], shown)
    assert result["command"] == (f"planner bench suite --quick --policy {mine} --scenarios long-lognormal "
                                 f"--out {out} --workers 2")
    assert result["workers"] == 2
    assert result["policy"] == str(mine)
    assert "Targets (policy" in shown and "example policy as shipped" not in shown
    report = result["scenarios"]["long-lognormal"]["report"]
    assert report["sim"]["forecast"]["quantile"] == 0.95  # the planner ran under it, not the example's 0.8


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository as `git clone` gives it, in a folder with nothing beside it (no ../shared)."""
    from tests.support.clone import clone_head, run_in_clone

    path = clone_head(tmp_path_factory.mktemp("fresh"))
    where = run_in_clone(path, ["-c", "import planner; print(planner.__file__)"])
    assert where.stdout.strip() == str(path / "planner" / "__init__.py"), where  # the clone's code, not this tree's
    return path


@pytest.mark.slow
def test_quick_suite_end_to_end_from_a_fresh_clone(clone: Path, tmp_path: Path) -> None:
    """Every default scenario, its traces read from what the clone ships (issue 29: nothing beside the repository)."""
    from tests.support.clone import run_in_clone

    out = tmp_path / "suite"
    done = run_in_clone(clone, ["-m", "planner.cli", "bench", "suite", "--quick", "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    doc = _check_suite(out, list(scenarios.default_names()), done.stdout, ("fleet", "fleet-day"))
    assert doc["command"] == f"planner bench suite --quick --out {out}"
    assert doc["policy"] == "policies/example.yaml"  # the example as shipped, by default


def test_seeds_bad_input_table_passes_in_a_fresh_clone(clone: Path) -> None:
    """The README's test command on a fresh clone: the seeds bad-input table (its missing-policy row met the
    traces check first) and the tests that read shipped traces and measurements run there, none skipped."""
    from tests.support.clone import run_in_clone

    done = run_in_clone(clone, ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                                "tests/test_bench_seeds.py::test_bad_input_is_one_line_and_exit_2",
                                "tests/test_sim_traces.py", "tests/test_perf_roofline.py"])
    assert done.returncode == 0, done.stdout[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "missing-policy" not in done.stdout, summary
