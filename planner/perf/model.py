"""Model shapes read from a Hugging Face ``config.json`` dict, and the facts derived from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "bf16": 2, "fp16": 2, "float32": 4, "fp32": 4, "fp8": 1,
               "float8_e4m3fn": 1, "int8": 1}


class ModelConfigError(ValueError):
    """A config.json that cannot describe a decoder we can model. The message names the field."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    dtype_bytes: int = 2
    kv_dtype_bytes: int = 2
    max_context_tokens: int = 32768
    # MoE (0 experts = dense). Expert MLPs replace the dense MLP on MoE layers.
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0  # leading dense layers before MoE starts (DeepSeek first_k_dense_replace)
    # Multi-head latent attention (DeepSeek): compressed KV instead of per-head K and V.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    # --- parameter counts -------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        return q + kv + o

    @property
    def dense_mlp_params_per_layer(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up, down (SwiGLU)

    @property
    def moe_mlp_params_per_layer(self) -> int:
        return 3 * self.hidden * (self.experts * self.expert_intermediate + self.shared_expert_intermediate)

    @property
    def active_moe_mlp_params_per_layer(self) -> int:
        return 3 * self.hidden * (self.experts_per_token * self.expert_intermediate
                                  + self.shared_expert_intermediate)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def layer_params(self) -> int:
        """Parameters in the transformer blocks (all experts counted)."""
        dense = (self.layers - self.moe_layers) * (self.attention_params_per_layer
                                                    + self.dense_mlp_params_per_layer)
        moe = self.moe_layers * (self.attention_params_per_layer + self.moe_mlp_params_per_layer)
        norms = self.layers * 2 * self.hidden
        return dense + moe + norms

    @property
    def active_layer_params(self) -> int:
        """Parameters one token touches in the blocks: what sets GEMM FLOPs per token."""
        dense = (self.layers - self.moe_layers) * (self.attention_params_per_layer
                                                    + self.dense_mlp_params_per_layer)
        moe = self.moe_layers * (self.attention_params_per_layer + self.active_moe_mlp_params_per_layer)
        return dense + moe

    @property
    def params(self) -> int:
        return self.layer_params + self.embedding_params + self.hidden  # + final norm

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) x layers x KV heads x head dim x bytes; MLA stores one compressed latent."""
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    def check_tp(self, tp: int) -> str | None:
        """Why ``tp`` cannot shard this model, or None when it can."""
        if tp < 1:
            return f"tp must be >= 1, got {tp}"
        if self.heads % tp:
            return f"tp {tp} does not divide the {self.heads} attention heads of {self.name}"
        if not self.kv_lora_rank and self.kv_heads % tp and tp % self.kv_heads:
            return f"tp {tp} does not divide the {self.kv_heads} KV heads of {self.name}"
        return None

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        # KV heads are split across TP ranks; when tp > kv_heads each rank keeps a replica of one head.
        if self.kv_lora_rank:
            return float(self.kv_bytes_per_token)
        shards = min(tp, self.kv_heads)
        return self.kv_bytes_per_token / shards


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None, required: bool = True) -> Any:
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return cfg[key]
    if required and default is None:
        raise ModelConfigError(f"config.json is missing field {keys[0]!r}")
    return default


def _positive_int(cfg: Mapping[str, Any], value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 or int(value) != value:
        raise ModelConfigError(f"config.json field {name!r} must be a positive integer, got {value!r}")
    return int(value)


def model_from_hf_config(cfg: Mapping[str, Any], name: str) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict (Llama/Qwen/Mistral; Qwen-MoE/DeepSeek fields)."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError("config.json must be a JSON object")
    text_cfg = cfg.get("text_config")
    if isinstance(text_cfg, Mapping) and "hidden_size" not in cfg:
        cfg = text_cfg
    hidden = _positive_int(cfg, _get(cfg, "hidden_size", "d_model", "n_embd"), "hidden_size")
    layers = _positive_int(cfg, _get(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
    heads = _positive_int(cfg, _get(cfg, "num_attention_heads", "n_head"), "num_attention_heads")
    kv_heads = _positive_int(cfg, _get(cfg, "num_key_value_heads", default=heads), "num_key_value_heads")
    head_dim_raw = _get(cfg, "head_dim", default=hidden // heads)
    head_dim = _positive_int(cfg, head_dim_raw, "head_dim")
    inter = _positive_int(cfg, _get(cfg, "intermediate_size", "ffn_dim", "n_inner"), "intermediate_size")
    vocab = _positive_int(cfg, _get(cfg, "vocab_size"), "vocab_size")
    dtype = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16"))
    if dtype not in DTYPE_BYTES:
        raise ModelConfigError(f"config.json field 'torch_dtype' is {dtype!r}; allowed: {sorted(DTYPE_BYTES)}")
    max_ctx = _positive_int(cfg, _get(cfg, "max_position_embeddings", default=32768), "max_position_embeddings")

    experts = int(_get(cfg, "num_experts", "n_routed_experts", "num_local_experts", default=0, required=False) or 0)
    per_tok = int(_get(cfg, "num_experts_per_tok", "moe_topk", default=0, required=False) or 0)
    expert_inter = int(_get(cfg, "moe_intermediate_size", default=0, required=False) or 0)
    if experts and not expert_inter:
        expert_inter = inter  # Mixtral-style: experts use intermediate_size
    shared = int(_get(cfg, "shared_expert_intermediate_size", default=0, required=False) or 0)
    n_shared = int(_get(cfg, "n_shared_experts", default=0, required=False) or 0)
    if n_shared and not shared:
        shared = n_shared * expert_inter
    dense_layers = int(_get(cfg, "first_k_dense_replace", default=0, required=False) or 0)
    if experts and not per_tok:
        raise ModelConfigError("config.json has experts but no 'num_experts_per_tok'")
    kv_lora = int(_get(cfg, "kv_lora_rank", default=0, required=False) or 0)
    rope_dim = int(_get(cfg, "qk_rope_head_dim", default=0, required=False) or 0)
    return ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=inter, vocab=vocab, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype_bytes=DTYPE_BYTES[dtype], kv_dtype_bytes=DTYPE_BYTES[dtype], max_context_tokens=max_ctx,
        experts=experts, experts_per_token=per_tok, expert_intermediate=expert_inter,
        shared_expert_intermediate=shared, dense_layers=dense_layers if experts else 0,
        kv_lora_rank=kv_lora, qk_rope_head_dim=rope_dim,
    )
