"""`planner profile` as a user runs it: contract flags, exact grids, plots, bad input, infeasible SLA."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.cli import run
from planner.profile import load_profile


def test_profile_writes_profile_table_and_plots(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    rc = run(["profile", "--model", "qwen3-32b", "--gpu", "h200", "--backend", "analytical", "--tp", "1,2,4,8",
              "--isl", "4000", "--osl", "500", "--ttft-ms", "500", "--itl-ms", "30", "--out", str(out),
              "--plots", str(tmp_path / "plots")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Per tensor-parallel size" in text and "disaggregated" in text
    p = load_profile(out)
    assert [s.tp for s in p.prefill] == [1, 2, 4, 8]
    assert p.selection.prefill.meets_sla and p.selection.decode.meets_sla
    assert p.selection.decode.batch >= 1
    for name in ("ttft_vs_isl.png", "itl_vs_batch.png", "throughput_vs_latency.png"):
        png = tmp_path / "plots" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_given_grids_are_used_exactly(tmp_path) -> None:
    out = tmp_path / "p.json"
    rc = run(["profile", "--model", "qwen3-8b", "--tp", "1,2", "--isl-grid", "100,300,900",
              "--batch-grid", "1,3", "--context-grid", "700,1400", "--out", str(out)])
    assert rc == 0
    p = load_profile(out)
    for s in p.prefill:
        assert [pt.isl for pt in s.points] == [100, 300, 900]
    for s in p.decode:
        assert sorted((pt.batch, pt.context_tokens) for pt in s.points) == [(1, 700), (1, 1400), (3, 700), (3, 1400)]


def test_selection_picks_highest_throughput_per_gpu_meeting_sla(tmp_path) -> None:
    out = tmp_path / "p.json"
    assert run(["profile", "--model", "qwen3-32b", "--isl", "4000", "--osl", "500", "--ttft-ms", "500",
                "--itl-ms", "30", "--out", str(out)]) == 0
    p = load_profile(out)
    sel = p.selection
    for s in p.prefill:
        c = p.prefill_curve(s.tp)
        if c.ttft_ms(4000).value <= 500:
            assert c.tokens_per_s_per_gpu(4000) <= sel.prefill.tokens_per_s_per_gpu + 1e-6


def test_infeasible_sla_exits_3_with_closest(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    rc = run(["profile", "--model", "llama-3.1-70b", "--tp", "1,2", "--isl", "8000", "--ttft-ms", "50",
              "--itl-ms", "1", "--out", str(out)])
    assert rc == 3
    err = capsys.readouterr().err
    assert "closest" in err and "over" in err


BAD = [
    (["--model", "gpt-9"], "unknown model"),
    (["--model", "qwen3-8b", "--gpu", "tpu9"], "unknown GPU"),
    (["--model", "qwen3-8b", "--tp", "3"], "does not divide"),
    (["--model", "qwen3-8b", "--tp", "1,x"], "not an integer"),
    (["--model", "qwen3-8b", "--ttft-ms", "0"], "--ttft-ms"),
    (["--model", "qwen3-8b", "--itl-ms", "-5"], "--itl-ms"),
    (["--model", "qwen3-8b", "--isl", "0"], "--isl"),
    (["--model", "qwen3-8b", "--batch-grid", "1,0"], "--batch-grid"),
    (["--model", "qwen3-8b", "--isl-grid", "-128"], "--isl-grid"),
    (["--model", "qwen3-8b", "--kv-link-gbps", "0"], "--kv-link-gbps"),
    (["--model", "qwen3-8b", "--backend", "magic"], "--backend"),
    (["--model", "/nonexistent/config.json"], "not found"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[b[1] for b in BAD])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, needle) -> None:
    rc = run(["profile", *args, "--out", str(tmp_path / "p.json")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


def test_malformed_config_json(tmp_path, capsys) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2}))
    assert run(["profile", "--model", str(cfg), "--out", str(tmp_path / "p.json")]) == 2
    assert "num_attention_heads" in capsys.readouterr().err


def test_console_script_runs_without_traceback(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "profile", "--model", "nope", "--out",
                           str(tmp_path / "p.json")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "unknown model" in proc.stderr
