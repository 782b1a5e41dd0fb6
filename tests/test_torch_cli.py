"""`planner profile --backend torch`: one-line errors (exit 2) without torch, without a GPU, on bad flags."""

from __future__ import annotations

import json
import sys

import pytest

from planner.cli import run

TINY_CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 16, "intermediate_size": 128, "vocab_size": 96, "torch_dtype": "bfloat16",
               "max_position_embeddings": 1024}


@pytest.fixture()
def base(tmp_path) -> list[str]:
    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(TINY_CONFIG))
    return ["profile", "--model", str(cfg), "--backend", "torch", "--tp", "1", "--isl-grid", "16",
            "--batch-grid", "1", "--context-grid", "32"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def test_without_torch_says_so_and_exits_2(monkeypatch, capsys, tmp_path, base) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    rc = run([*base, "--out", str(tmp_path / "p.json")])
    assert rc == 2
    assert "needs PyTorch" in _one_line_error(capsys)
    assert not (tmp_path / "p.json").exists()


def test_cuda_without_a_gpu_says_so_and_exits_2(capsys, tmp_path, base) -> None:
    torch = pytest.importorskip("torch", reason="torch not installed (optional extra)")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc = run([*base, "--device", "cuda", "--out", str(tmp_path / "p.json")])
    assert rc == 2
    assert "no CUDA GPU" in _one_line_error(capsys)


BAD = [
    (["--device", "tpu"], "--device"),
    (["--iters", "0"], "--iters"),
    (["--warmup", "-1"], "--warmup"),
]


@pytest.mark.parametrize(("extra", "named"), BAD, ids=["device", "iters", "warmup"])
def test_bad_torch_flags_exit_2(extra, named, capsys, tmp_path, base) -> None:
    if named == "--device":
        pytest.importorskip("torch", reason="torch not installed (optional extra)")
    rc = run([*base, *extra, "--out", str(tmp_path / "p.json")])
    assert rc == 2
    assert named in _one_line_error(capsys)


def test_cpu_run_writes_a_torch_profile(tmp_path, base) -> None:
    pytest.importorskip("torch", reason="torch not installed (optional extra)")
    from planner.profile import load_profile

    out = tmp_path / "p.json"
    rc = run([*base, "--device", "cpu", "--warmup", "0", "--iters", "1", "--ttft-ms", "1e6", "--itl-ms", "1e6",
              "--out", str(out)])
    assert rc == 0
    p = load_profile(out)
    assert p.provenance.backend == "torch" and p.provenance.software["device"] == "cpu"
