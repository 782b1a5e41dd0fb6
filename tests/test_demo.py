"""`planner demo` runs the whole pipeline on the embedded trace (the README's first command)."""

from __future__ import annotations

import json

from planner.cli import run
from planner.profile import load_profile


def test_demo_runs_profile_plan_and_backtest(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    rc = run(["demo", "--out", str(out), "--minutes", "4", "--warmup-minutes", "1", "--rate-scale", "2",
              "--baselines", "static", "--no-plots"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "plan (what-if)" in text and "SLA attainment vs GPU-hours" in text
    profile = load_profile(out / "qwen3-32b-h200.json")
    assert profile.selection is not None and profile.selection.prefill.meets_sla
    report = json.loads((out / "backtest" / "report.json").read_text())
    assert set(report["policies"]) == {"planner", "static"}
    trace = report["trace"]
    assert trace["rate_scale"] == 2 and 240 < trace["duration_s"] <= 300 and trace["warmup_s"] == 60
    assert {"lower_bound", "offline"} <= set(report["references"])
    for p in report["policies"].values():
        assert p["requests"] == trace["scored_requests"] > 0
        assert 0.0 <= p["attainment_joint"] <= min(p["attainment_ttft"], p["attainment_itl"]) + 1e-12


def test_demo_bad_flag_is_one_line(tmp_path, capsys) -> None:
    assert run(["demo", "--out", str(tmp_path), "--rate-scale", "0"]) == 2
    assert "--rate-scale" in capsys.readouterr().err
