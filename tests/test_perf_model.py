"""Model math against known values (table-driven)."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_model
from planner.errors import UserError
from planner.perf.model import ModelConfigError, model_from_hf_config

# (name, params in billions (published), tolerance, kv bytes/token)
KNOWN = [
    ("qwen3-0.6b", 0.596, 0.01, 114_688),
    ("qwen3-8b", 8.19, 0.02, 147_456),
    ("qwen3-32b", 32.76, 0.05, 262_144),
    ("llama-3.1-8b", 8.03, 0.02, 131_072),
    ("llama-3.1-70b", 70.55, 0.1, 327_680),
]


@pytest.mark.parametrize(("name", "params_b", "tol_b", "kv"), KNOWN, ids=[k[0] for k in KNOWN])
def test_shipped_models_match_published_facts(name: str, params_b: float, tol_b: float, kv: int) -> None:
    m = load_model(name)
    assert m.params / 1e9 == pytest.approx(params_b, abs=tol_b)
    assert m.kv_bytes_per_token == kv
    assert m.weight_bytes == m.params * 2  # bf16


def test_kv_formula_is_two_layers_heads_dim_bytes() -> None:
    m = load_model("qwen3-32b")
    assert m.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2 == 262_144


QWEN_MOE = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
            "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
            "num_experts_per_tok": 8, "vocab_size": 151936, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
DEEPSEEK = {"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
            "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
            "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
            "qk_rope_head_dim": 64, "vocab_size": 129280, "torch_dtype": "bfloat16"}


def test_qwen_moe_counts_all_experts_but_activates_few() -> None:
    m = model_from_hf_config(QWEN_MOE, "qwen3-30b-a3b")
    assert m.is_moe and m.experts == 128 and m.experts_per_token == 8
    # Qwen3-30B-A3B: ~30.5 B total, ~3.3 B active
    assert m.params / 1e9 == pytest.approx(30.5, abs=0.5)
    active = m.active_layer_params + m.embedding_params
    assert active / 1e9 == pytest.approx(3.3, abs=0.4)
    assert m.kv_bytes_per_token == 2 * 48 * 4 * 128 * 2


def test_deepseek_mla_kv_and_size() -> None:
    m = model_from_hf_config(DEEPSEEK, "deepseek-v3")
    assert m.dense_layers == 3 and m.shared_expert_intermediate == 2048
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2  # compressed latent, not per-head K/V
    assert m.params / 1e9 == pytest.approx(671, rel=0.05)


BAD_CONFIGS = [
    ({}, "hidden_size"),
    ({**QWEN_MOE, "hidden_size": -1}, "hidden_size"),
    ({**QWEN_MOE, "num_attention_heads": "many"}, "num_attention_heads"),
    ({**QWEN_MOE, "torch_dtype": "float7"}, "torch_dtype"),
    ({**QWEN_MOE, "num_experts_per_tok": 0}, "num_experts_per_tok"),
]


@pytest.mark.parametrize(("cfg", "field"), BAD_CONFIGS, ids=["empty", "negative", "string", "dtype", "moe-topk"])
def test_bad_config_names_the_field(cfg: dict, field: str) -> None:
    with pytest.raises(ModelConfigError, match=field):
        model_from_hf_config(cfg, "x")


@pytest.mark.parametrize(("model", "tp", "ok"), [("qwen3-32b", 8, True), ("qwen3-32b", 3, False),
                                                  ("qwen3-0.6b", 16, True), ("qwen3-0.6b", 32, False),
                                                  ("llama-3.1-70b", 6, False)])
def test_tp_must_divide_heads(model: str, tp: int, ok: bool) -> None:
    assert (load_model(model).check_tp(tp) is None) is ok


def test_load_model_by_path_and_errors(tmp_path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(QWEN_MOE))
    assert load_model(str(p)).experts == 128
    with pytest.raises(UserError, match="unknown model"):
        load_model("gpt-9")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_model(str(bad))
    with pytest.raises(UserError, match="not found"):
        load_model(str(tmp_path / "missing.json"))
