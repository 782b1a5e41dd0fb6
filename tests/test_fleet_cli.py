"""`planner plan --fleet` and `planner backtest --fleet` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import run
from planner.decide.outlook import outlook
from planner.decide.spec import DeciderSpec
from planner.decide.state import PlannerState
from planner.decide.whatif import plan, what_if_inputs, what_if_policy
from planner.fleet import plan_fleet, policy_ask
from planner.fleet_file import load_fleet
from tests.support.fleet_support import member, wasted, write_fleet


@pytest.fixture
def fleet_path(tmp_path: Path) -> Path:
    return write_fleet(tmp_path, [member("chat", 10), member("batch", 0), member("code", 0)], max_gpus=24,
                       prices={"h200": 3.5})


def _plan_json(capsys, *args: str) -> tuple[int, dict]:  # noqa: ANN001
    rc = run(["plan", *args, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_a_fleet_within_budget_gets_what_each_policy_plans(fleet_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out = _plan_json(capsys, "--fleet", str(fleet_path), "--rate-rps", "20", "--isl", "1024", "--osl", "256")
    fleet = load_fleet(fleet_path)
    alone = plan(fleet.member("chat").policy, fleet.member("chat").profile, 20, 1024, 256)
    assert rc == 0 and not out["binds"]
    assert out["policies"]["chat"]["granted"] == alone.targets() == out["policies"]["chat"]["wanted"]
    assert out["used_gpus"] == out["wanted_gpus"] <= 24 and out["decisions"]["chat"]["gpus"] == alone.gpus


def test_a_binding_budget_goes_to_the_higher_priority_first(fleet_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out = _plan_json(capsys, "--fleet", str(fleet_path), "--rate-rps", "40", "--isl", "1024", "--osl", "256",
                         "--load", "chat=60,1155,211")
    chat, batch = out["policies"]["chat"], out["policies"]["batch"]
    assert rc == 3  # the lower priorities now miss their SLA: not a success
    assert out["binds"] and out["used_gpus"] <= 24 < out["wanted_gpus"]
    assert chat["granted"] == chat["wanted"] and chat["reason"] is None
    assert batch["granted_gpus"] < batch["wanted_gpus"] and batch["reason"] == "fleet_priority"
    assert "fleet_priority" in out["decisions"]["batch"]["pools"]["prefill"]["reasons"]


def test_the_table_names_the_reason_and_the_budget(fleet_path: Path, capsys) -> None:  # noqa: ANN001
    rc = run(["plan", "--fleet", str(fleet_path), "--rate-rps", "40", "--isl", "1024", "--osl", "256",
              "--load", "chat=60,1155,211"])
    cap = capsys.readouterr()
    assert rc == 3 and "fleet_priority" in cap.out and "of 24 GPUs granted" in cap.out and "per hour" in cap.out
    assert "the fleet's GPU budget (fleet_priority)" in cap.err


def test_a_clamped_policy_gets_a_balanced_prefill_decode_pair(capsys) -> None:  # noqa: ANN001
    """The shipped example fleet at 150 req/s: the conv policy's 19 GPUs once went 17 prefill + 1 decode (a
    decode pool that carries a quarter of the load beside prefill for most of it); its grant now lies on
    its SLA frontier: no pool holds more than the load the other carries needs."""
    example = Path(__file__).resolve().parent.parent / "fleets" / "example.yaml"
    rc, out = _plan_json(capsys, "--fleet", str(example), "--rate-rps", "150", "--isl", "1024", "--osl", "256")
    conv = out["policies"]["qwen3-32b-azure-conv"]
    assert rc == 3 and out["binds"] and conv["reason"] == "fleet_priority"
    assert conv["granted"]["decode"] >= 3 and conv["granted"]["prefill"] <= 14, conv["granted"]
    assert out["used_gpus"] == 48  # nothing hoarded: the leftover went to the code policy

    fleet = load_fleet(example)
    tick = plan_fleet(fleet, {m.name: (150.0, 1024.0, 256.0) for m in fleet.members})
    assert tick.granted["qwen3-32b-azure-conv"].targets() == conv["granted"]
    conv_member = fleet.member("qwen3-32b-azure-conv")
    pol = what_if_policy(conv_member.policy)
    obs, forecast = what_if_inputs(pol, 150.0, 1024.0, 256.0)
    look = outlook(DeciderSpec.build(pol, conv_member.profile, stale_after_s=float("inf")), obs, forecast, None, 0.0)
    asked = policy_ask(conv_member.name, conv_member.priority, pol, tick.wanted[conv_member.name], PlannerState(),
                       look)
    assert not wasted(asked, conv["granted"])


@pytest.mark.parametrize(("args", "needle"), [
    pytest.param(["--load", "chat=1,2"], "expected NAME=RATE_RPS,ISL,OSL", id="load-short"),
    pytest.param(["--load", "nope=1,2,3"], "no policy 'nope' in the fleet; allowed: chat, batch, code", id="load-name"),
    pytest.param(["--load", "chat=x,2,3"], "must be numbers", id="load-number"),
    pytest.param(["--load", "chat=-1,2,3"], "--load chat rate", id="load-negative"),
    pytest.param(["--load", "chat=1,2,3"], "no load for batch, code", id="load-missing"),
    pytest.param(["--rate-rps", "1", "--isl", "1", "--osl", "1", "--policy", "x.yaml"], "--fleet and --policy",
                 id="both"),
])
def test_plan_fleet_rejects_bad_input(fleet_path: Path, args: list[str], needle: str, capsys) -> None:  # noqa: ANN001
    rc = run(["plan", "--fleet", str(fleet_path), *args])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_plan_fleet_with_a_bad_fleet_file_names_the_key(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = write_fleet(tmp_path, [member("a"), member("b")], max_gpus=1)
    rc = run(["plan", "--fleet", str(path), "--rate-rps", "1", "--isl", "100", "--osl", "10"])
    err = capsys.readouterr().err
    assert rc == 2 and "key 'budget.max_gpus' = 1: below the policies' floors" in err


def test_plan_without_policy_or_fleet_says_what_is_missing(capsys) -> None:  # noqa: ANN001
    rc = run(["plan", "--rate-rps", "1", "--isl", "100", "--osl", "10"])
    assert rc == 2 and "--policy: required (or --fleet)" in capsys.readouterr().err


TRACE = Path(__file__).resolve().parents[1] / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"


def _traces(*names: str) -> list[str]:
    return [arg for n in names for arg in ("--trace", f"{n}={TRACE}")]


@pytest.mark.slow
def test_backtest_fleet_writes_the_fleet_report(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = write_fleet(tmp_path, [member("chat", 10), member("batch", 0), member("code", 0)], max_gpus=14,
                       prices={"h200": 3.5})
    out = tmp_path / "out"
    rc = run(["backtest", "--fleet", str(path), *_traces("chat", "batch", "code"), "--duration-s", "600",
              "--rate-scale", "2", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    f = report["fleet"]
    assert rc == 0 and "# Fleet backtest" in capsys.readouterr().out
    assert f["budget_gpus"] == 14 and f["max_gpus_granted"] <= 14 and f["binding_ticks"] > 0
    assert set(f) >= {"budget_gpus", "max_gpus_used", "gpu_hours", "cold_starts", "cost"}
    assert f["cost"] == pytest.approx(3.5 * f["gpu_hours"], rel=1e-3)
    chat, batch = report["policies"]["chat"], report["policies"]["batch"]
    assert chat["clamped_ticks"] == 0 < batch["clamped_ticks"]  # the budget binds on the lower priority only
    assert chat["requests"] > 0 and chat["gpu_hours"] > 0
    unshared = report["comparisons"]["unshared"]
    assert unshared["max_gpus_used"] > 14  # without the budget the same planners want more than it allows
    assert f["gpu_hours"] == pytest.approx(sum(p["gpu_hours"] for p in report["policies"].values()), abs=1e-3)
    assert report["checks"]["gpu_hours_vs_static_peak"] == pytest.approx(
        f["gpu_hours"] / report["comparisons"]["static_peak"]["gpu_hours"], rel=1e-3)


@pytest.mark.parametrize(("args", "needle"), [
    pytest.param(_traces("chat", "batch"), "--trace: no trace for code", id="missing"),
    pytest.param([*_traces("chat", "batch", "code"), "--trace", "nope=x.csv"], "no policy 'nope'", id="unknown"),
    pytest.param([*_traces("chat", "batch", "code"), "--trace", f"chat={TRACE}"], "already has a trace", id="twice"),
    pytest.param(["--trace", str(TRACE)], "expected POLICY=FILE", id="plain-path"),
    pytest.param([*_traces("chat", "batch"), "--trace", "code=/nonexistent.csv"], "--trace code=/nonexistent.csv",
                 id="unreadable"),
    pytest.param([*_traces("chat", "batch", "code"), "--policy", "p.yaml"], "--policy: not with --fleet", id="policy"),
])
def test_backtest_fleet_rejects_bad_traces(fleet_path: Path, tmp_path: Path, args: list[str], needle: str,
                                           capsys) -> None:  # noqa: ANN001
    rc = run(["backtest", "--fleet", str(fleet_path), *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_backtest_without_policy_or_fleet_says_what_is_missing(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = run(["backtest", "--trace", str(TRACE), "--out", str(tmp_path / "o")])
    assert rc == 2 and "--policy: required (or --fleet)" in capsys.readouterr().err


def _model_csv(path: Path, rows: list[tuple[float, int, int, str]]) -> Path:
    path.write_text("ts,in,out,model\n" + "".join(f"{t},{i},{o},{m}\n" for t, i, o, m in rows))
    return path


COLS = "arrival=ts,isl=in,osl=out,model=model"


def test_one_trace_is_split_by_its_model_column_keeping_the_time_origin(tmp_path: Path) -> None:
    from planner.commands.fleet_backtest import split_by_model

    rows = [(0.0, 100, 10, "a"), (2.5, 200, 20, "b"), (4.0, 300, 30, "a"), (9.0, 400, 40, "b")]
    traces = split_by_model(_model_csv(tmp_path / "t.csv", rows), "csv", dict(x.split("=") for x in COLS.split(",")),
                            ("a", "b"))
    assert traces["a"].arrival_s.tolist() == [0.0, 4.0] and traces["a"].isl.tolist() == [100, 300]
    assert traces["b"].arrival_s.tolist() == [2.5, 9.0]  # b's first request stays 2.5 s after the file's first


@pytest.mark.slow
def test_backtest_fleet_from_one_trace_with_a_model_column(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = write_fleet(tmp_path, [member("chat", 10), member("batch", 0)], max_gpus=12)
    rows = [(i * 0.25, 800 + (i % 7) * 50, 100 + (i % 5) * 20, "chat" if i % 3 else "batch") for i in range(1600)]
    trace = _model_csv(tmp_path / "mixed.csv", rows)
    out = tmp_path / "out"
    rc = run(["backtest", "--fleet", str(path), "--trace", str(trace), "--format", "csv", "--columns", COLS,
              "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    assert rc == 0, capsys.readouterr().err
    assert report["policies"]["chat"]["requests"] == sum(1 for r in rows if r[3] == "chat")
    assert report["policies"]["batch"]["requests"] == sum(1 for r in rows if r[3] == "batch")


@pytest.mark.parametrize(("rows", "extra", "needle"), [
    pytest.param([(0.0, 100, 10, "chat")], [], "no request of model batch, code", id="model-missing"),
    pytest.param([(0.0, 100, 10, "chat")], ["--format", "azure"], "needs --format csv or jsonl", id="format"),
])
def test_backtest_fleet_model_column_errors(fleet_path: Path, tmp_path: Path, rows: list, extra: list[str],
                                            needle: str, capsys) -> None:  # noqa: ANN001
    trace = _model_csv(tmp_path / "m.csv", rows)
    rc = run(["backtest", "--fleet", str(fleet_path), "--trace", str(trace), "--format", "csv", "--columns", COLS,
              *extra, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_model_column_is_only_for_a_fleet(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = run(["backtest", "--trace", str(TRACE), "--policy", "p.yaml", "--profile", "x.json", "--columns", COLS,
              "--out", str(tmp_path / "o")])
    assert rc == 2 and "--columns model=...: only with --fleet" in capsys.readouterr().err


def _long_rows(limit: int) -> list[tuple[float, int, int, str]]:
    """Two models' requests, every 0.25 s for 5 minutes; two of chat's prompts past ``limit``."""
    rows = [(i * 0.25, 800 + (i % 7) * 50, 100, "chat" if i % 3 else "batch") for i in range(1200)]
    for i in (10, 700):  # both chat's (i % 3 != 0)
        rows[i] = (rows[i][0], limit + 1, 100, "chat")
    return rows


def test_backtest_fleet_names_the_model_and_the_flag_for_an_oversized_request(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from planner.sim.evaluate.backtest import request_token_limit

    path = write_fleet(tmp_path, [member("chat", 10), member("batch", 0)], max_gpus=12)
    limit = request_token_limit(load_fleet(path).member("chat").profile)
    trace = _model_csv(tmp_path / "long.csv", _long_rows(limit))
    rc = run(["backtest", "--fleet", str(path), "--trace", str(trace), "--format", "csv", "--columns", COLS,
              "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "(model chat): request #" in err and "2 such requests" in err and "--oversized drop" in err, err


@pytest.mark.slow
def test_backtest_fleet_drops_each_models_oversized_requests(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from planner.sim.evaluate.backtest import request_token_limit

    path = write_fleet(tmp_path, [member("chat", 10), member("batch", 0)], max_gpus=12)
    limit = request_token_limit(load_fleet(path).member("chat").profile)
    rows = _long_rows(limit)
    trace = _model_csv(tmp_path / "long.csv", rows)
    rc = run(["backtest", "--fleet", str(path), "--trace", str(trace), "--format", "csv", "--columns", COLS,
              "--oversized", "drop", "--no-plots", "--out", str(tmp_path / "o")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert f"note: {trace} (model chat): 2 of {sum(r[3] == 'chat' for r in rows):,} requests" in cap.out
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["sim"]["oversized"] == {"chat": {"mode": "drop", "limit_tokens": limit, "requests": 2,
                                                   "dropped": 2, "truncated": 0},
                                          "batch": {"mode": "drop", "limit_tokens": limit, "requests": 0,
                                                    "dropped": 0, "truncated": 0}}
    assert report["policies"]["chat"]["requests"] == sum(1 for r in rows if r[3] == "chat") - 2
