"""`planner plan` and `planner bench decide` as a user runs them."""

from __future__ import annotations

import json

import pytest

from planner.cli import run
from tests.support.decide_support import EXAMPLE


def test_plan_prints_the_decision_as_json(capsys) -> None:
    rc = run(["plan", "--policy", str(EXAMPLE), "--rate-rps", "50", "--isl", "1155", "--osl", "211", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["pools"]["prefill"]["replicas"] == 8 and out["pools"]["decode"]["replicas"] == 2
    assert out["pools"]["decode"]["gpus_per_replica"] == 2 and out["gpus"] == 12
    # A what-if has no measured error budget: the example sizes conservatively (its forecast.quantile) and says so.
    assert out["reasons"] == ["sla_capacity", "budget_unmeasured"]
    assert out["predicted_ttft_ms"] <= 1000 and out["predicted_itl_ms"] <= 40


def test_plan_table_names_pools_and_predictions(capsys) -> None:
    rc = run(["plan", "--policy", str(EXAMPLE), "--rate-rps", "400", "--isl", "1155", "--osl", "211"])
    out = capsys.readouterr().out
    assert rc == 3  # 400 req/s needs > 16 prefill replicas: the ceiling misses the SLA (tests/test_cli_errors.py)
    assert "prefill" in out and "decode" in out and "ceiling" in out


@pytest.mark.parametrize("args, needle", [
    pytest.param(["--rate-rps", "-1", "--isl", "100", "--osl", "10"], "--rate-rps", id="negative-rate"),
    pytest.param(["--rate-rps", "nan", "--isl", "100", "--osl", "10"], "--rate-rps", id="nan-rate"),
    pytest.param(["--rate-rps", "1", "--isl", "0", "--osl", "10"], "--isl", id="zero-isl"),
    pytest.param(["--rate-rps", "1", "--isl", "10", "--osl", "-3"], "--osl", id="negative-osl"),
])
def test_plan_rejects_bad_load(args, needle, capsys) -> None:
    rc = run(["plan", "--policy", str(EXAMPLE), *args])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_plan_missing_policy_file(tmp_path, capsys) -> None:
    rc = run(["plan", "--policy", str(tmp_path / "nope.yaml"), "--rate-rps", "1", "--isl", "10", "--osl", "10"])
    assert rc == 2 and "policy file not found" in capsys.readouterr().err


def test_plan_infeasible_sla_exits_3(tmp_path, capsys) -> None:
    pol = tmp_path / "tight.yaml"
    pol.write_text(EXAMPLE.read_text().replace("ttft_ms: 1000", "ttft_ms: 50")
                   .replace("profiles/h200/qwen3-32b.json", str(EXAMPLE.parent.parent / "profiles/h200/qwen3-32b.json")))
    rc = run(["plan", "--policy", str(pol), "--rate-rps", "10", "--isl", "4000", "--osl", "200", "--json"])
    captured = capsys.readouterr()
    assert rc == 3
    assert "sla_infeasible" in json.loads(captured.out)["pools"]["prefill"]["reasons"]
    assert "prefill" in captured.err


def test_bench_decide_prints_latency(capsys) -> None:
    rc = run(["bench", "decide", "--policy", str(EXAMPLE), "--ticks", "50"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("decide() [") == 3 and "p99" in out and " us" in out
