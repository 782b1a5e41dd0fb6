"""`planner forecast eval` and `planner bench forecast`: contract of the JSON, errors, binning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.cli import run
from planner.sim.traces.series import bin_requests


def write_series(path: Path, values: np.ndarray, step_s: float = 60.0) -> Path:
    lines = ["time_s,rate"] + [f"{i * step_s:g},{v:g}" for i, v in enumerate(values)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def series_csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    y = 100 + 20 * np.sin(np.arange(240) / 10) + rng.normal(0, 3, 240)
    return write_series(tmp_path / "s.csv", y)


def test_eval_writes_the_contract_json(series_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    rc = run(["forecast", "eval", "--series", str(series_csv), "--format", "csv", "--horizon-s", "180",
              "--models", "auto,ewma", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert set(report["models"]) == {"auto", "ewma"}
    keys = {"mase", "smape", "pinball_0.9", "pinball_0.95", "coverage_0.9", "latency_ms_p50", "latency_ms_p95"}
    for scores in report["models"].values():
        assert keys <= set(scores)
        assert 0 <= scores["coverage_0.9"] <= 1
    # a smooth sinusoid: following the trend beats repeating the last value
    assert report["models"]["auto"]["mase"] < 1.0
    assert "auto" in capsys.readouterr().out


def test_last_value_mase_is_one(series_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert run(["forecast", "eval", "--series", str(series_csv), "--format", "csv", "--models", "last-value",
                "--out", str(out)]) == 0
    assert json.loads(out.read_text())["models"]["last-value"]["mase"] == 1.0


@pytest.mark.parametrize("args,needle", [
    pytest.param(["--format", "parquet"], "--format", id="bad-format"),
    pytest.param(["--models", "auto,prophet"], "prophet", id="unknown-model"),
    pytest.param(["--horizon-s", "-5"], "--horizon-s", id="negative-horizon"),
    pytest.param(["--target", "isl"], "--target", id="no-isl-in-csv"),
    pytest.param(["--warmup-s", "1e7"], "origins", id="warmup-eats-everything"),
], )
def test_bad_arguments_exit_2_with_one_line(series_csv: Path, args: list[str], needle: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = ["forecast", "eval", "--series", str(series_csv), "--format", "csv", "--models", "last-value"]
    rc = run(base + args if "--format" not in args else base[:4] + args + base[6:])
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and "Traceback" not in err


def test_bad_csv_row_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("time_s,rate\n0,1\n60,abc\n120,3\n")
    assert run(["forecast", "eval", "--series", str(p), "--format", "csv"]) == 2
    assert "bad.csv:3" in capsys.readouterr().err


def test_missing_file_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["forecast", "eval", "--series", str(tmp_path / "nope.csv"), "--format", "csv"]) == 2
    assert "not found" in capsys.readouterr().err


def test_binning_counts_rate_and_means_per_step() -> None:
    arrival = np.array([0.0, 10.0, 70.0, 130.0, 150.0, 190.0])
    isl = np.array([100.0, 300.0, 50.0, 10.0, 30.0, 999.0])
    osl = np.array([1.0, 3.0, 5.0, 7.0, 9.0, 11.0])
    s = bin_requests(arrival, isl, osl, 60.0)  # 190 s spans 3 whole steps; the partial 4th is dropped
    np.testing.assert_allclose(s["rate"], [2 / 60, 1 / 60, 2 / 60])
    np.testing.assert_allclose(s["isl"], [200.0, 50.0, 20.0])
    np.testing.assert_allclose(s["osl"], [2.0, 5.0, 8.0])


def test_binning_marks_idle_steps_as_missing_means() -> None:
    s = bin_requests(np.array([0.0, 150.0, 200.0]), np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0]), 60.0)
    assert s["rate"][1] == 0.0 and np.isnan(s["isl"][1])


def test_eval_on_azure_trace_all_targets(shipped: Path, tmp_path: Path) -> None:
    out = tmp_path / "az.json"
    trace = shipped / "traces" / "azure2023" / "AzureLLMInferenceTrace_code.csv"
    rc = run(["forecast", "eval", "--series", str(trace), "--format", "azure", "--target", "all",
              "--models", "last-value,auto", "--out", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert set(report["targets"]) == {"rate", "isl", "osl"}
    assert report["targets"]["rate"]["models"]["last-value"]["mase"] == 1.0


def test_bench_forecast_prints_latency(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "forecast", "--models", "last-value,auto", "--ticks", "5"]) == 0
    out = capsys.readouterr().out
    assert "p95 ms" in out and "auto" in out


@pytest.mark.parametrize("args,needle", [
    pytest.param(["--set", "everything"], "--set", id="unknown-set"),
    pytest.param(["--traces", "/nonexistent/traces"], "--traces", id="no-traces-folder"),
    pytest.param(["--workers", "0"], "--workers", id="no-workers"),
])
def test_bench_forecast_held_out_rejects_bad_flags(args: list[str], needle: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "forecast", "--held-out", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_bench_forecast_held_out_real_traces(shipped: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "held.json"
    assert run(["bench", "forecast", "--held-out", "--traces", str(shipped / "traces"), "--workers", "2",
                "--out", str(out)]) == 0
    (group,) = json.loads(out.read_text()).values()
    names = {r["series"] for r in group["rows"]}
    assert {"azure-conv rate 60s", "azure-code output-tps 30s", "servegen rate 600s h=1800s"} <= names
    for r in group["rows"]:  # the ratio is the two MASEs' ratio (one scale per series)
        assert r["auto_mase_ratio"] == pytest.approx(r["mase_auto"] / r["mase_last_value"], abs=2e-4)
    assert "MASE lv" in capsys.readouterr().out
