"""A dense decoder with a model's shapes and random weights, sharded for tensor parallelism (needs torch).

What one rank holds and runs, Megatron-style: QKV and gate/up are column-parallel (each rank owns
``heads / tp`` query heads, ``kv_heads / tp`` KV heads - one replicated KV head when ``tp > kv_heads`` -
and ``intermediate / tp`` MLP columns); O and down are row-parallel, each followed by an all-reduce of
the ``tokens x hidden`` activations: two all-reduces per layer, as the roofline model assumes. The
embedding table and the LM head are split by vocabulary rows so that weight memory is ``weights / tp``
like an engine's; the embedding lookup stays local (no extra all-reduce: its cost is a gather of a few
rows) and the decode logits are all-gathered, as an engine gathers them to sample.

Each layer does what a real one does at the same cost: RMSNorm, fused QKV GEMM, RoPE, causal flash
attention (prefill) or GQA attention over the whole KV cache (decode), O GEMM, RMSNorm, fused gate/up
GEMM, SiLU x up, down GEMM. Left out, as negligible: Qwen3's per-head QK norm, writing the prefill KV to
a cache, sampling. Weights are random (no download): the kernels do the same work on any values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from planner.perf.model import ModelSpec

AllReduce = Callable[[torch.Tensor], None]
AllGather = Callable[[torch.Tensor], torch.Tensor]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ShardShape:
    """The tensors one rank of a ``world``-way tensor-parallel replica holds."""

    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int  # 0: no embedding table and no LM head

    @classmethod
    def of(cls, model: ModelSpec, world: int, include_lm_head: bool = True) -> ShardShape:
        why = model.check_tp(world)
        if why:
            raise ValueError(why)
        if model.is_moe or model.kv_lora_rank:
            raise ValueError(f"{model.name}: the torch backend builds dense GQA decoders only (no MoE, no MLA)")
        kv = model.kv_heads // world if world <= model.kv_heads else 1
        vocab = _ceil_div(model.vocab, world) if include_lm_head and model.vocab else 0
        return cls(layers=model.layers, hidden=model.hidden, q_heads=model.heads // world, kv_heads=kv,
                   head_dim=model.head_dim, intermediate=_ceil_div(model.intermediate, world), vocab=vocab)

    @property
    def qkv_width(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token on this rank, in bf16 (what the decode cache allocates)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def prefill_activation_bytes(self, isl: int, dtype_bytes: int) -> int:
        """Peak transient memory of one prefill layer, generously (hidden states, QKV, attention, MLP)."""
        per_token = 6 * self.hidden + 3 * self.qkv_width + 3 * self.intermediate + 2 * self.q_heads * self.head_dim
        return isl * per_token * dtype_bytes + (256 << 20)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope_tables(positions: int, head_dim: int, device: Any, dtype: torch.dtype,
                theta: float = 1_000_000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(positions, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class ShardedDecoder:
    """Random-weight decoder for one rank. ``all_reduce`` / ``all_gather`` are identity at world 1."""

    def __init__(self, shape: ShardShape, device: Any, dtype: torch.dtype, all_reduce: AllReduce | None = None,
                 all_gather: AllGather | None = None, seed: int = 0, eps: float = 1e-6) -> None:
        self.shape, self.device, self.dtype, self.eps = shape, torch.device(device), dtype, eps
        self._all_reduce = all_reduce
        self._all_gather = all_gather
        gen = torch.Generator(device=self.device).manual_seed(seed)
        s = shape

        def weight(out_f: int, in_f: int) -> torch.Tensor:
            # Scaled like a trained layer so activations stay finite through many random layers.
            return torch.empty(out_f, in_f, device=self.device, dtype=dtype).normal_(0.0, in_f ** -0.5, generator=gen)

        def norm() -> torch.Tensor:
            return torch.ones(s.hidden, device=self.device, dtype=dtype)

        self.layers = [dict(attn_norm=norm(), qkv=weight(s.qkv_width, s.hidden),
                            o=weight(s.hidden, s.q_heads * s.head_dim), mlp_norm=norm(),
                            gate_up=weight(2 * s.intermediate, s.hidden), down=weight(s.hidden, s.intermediate))
                       for _ in range(s.layers)]
        self.final_norm = norm()
        self.embed = weight(s.vocab, s.hidden) if s.vocab else None
        self.lm_head = weight(s.vocab, s.hidden) if s.vocab else None
        self._gen = gen
        self._hidden_in: torch.Tensor | None = None

    # --- helpers ---------------------------------------------------------------------------------------
    def weight_bytes(self) -> int:
        tensors = [t for layer in self.layers for t in layer.values()] + [self.final_norm]
        tensors += [t for t in (self.embed, self.lm_head) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    def random_like(self, *size: int) -> torch.Tensor:
        return torch.empty(*size, device=self.device, dtype=self.dtype).normal_(generator=self._gen)

    def random_tokens(self, n: int) -> torch.Tensor:
        high = max(1, self.shape.vocab)
        return torch.randint(0, high, (n,), device=self.device, generator=self._gen)

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self._all_reduce is not None:
            self._all_reduce(x)
        return x

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.embed is None:
            # Without a vocabulary the measured decoder starts from hidden states (profiles/measurements). One
            # static random buffer, made on the first (eager) call, so CUDA-graph capture allocates nothing.
            n = tokens.shape[0]
            if self._hidden_in is None or self._hidden_in.shape[0] < n:
                self._hidden_in = self.random_like(n, self.shape.hidden)
            return self._hidden_in[:n]
        return F.embedding(tokens, self.embed)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.shape.hidden,), w, self.eps)

    def _mlp(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        gate, up = F.linear(self._rms(x, layer["mlp_norm"]), layer["gate_up"]).chunk(2, dim=-1)
        return self._reduce(F.linear(F.silu(gate) * up, layer["down"]))

    def _split_qkv(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        s = self.shape
        qkv = F.linear(self._rms(x, layer["attn_norm"]), layer["qkv"])
        q, k, v = qkv.split([s.q_heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
        tokens = x.shape[0]
        return (q.view(tokens, s.q_heads, s.head_dim), k.view(tokens, s.kv_heads, s.head_dim),
                v.view(tokens, s.kv_heads, s.head_dim))

    # --- stages ------------------------------------------------------------------------------------------
    def prefill(self, tokens: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor | None:
        """One request of ``len(tokens)`` tokens; returns the last token's (local) logits."""
        s = self.shape
        n = tokens.shape[0]
        cos_n, sin_n = cos[:n, None, :], sin[:n, None, :]
        x = self._embed(tokens)
        for layer in self.layers:
            q, k, v = self._split_qkv(x, layer)
            q = q * cos_n + _rotate_half(q) * sin_n
            k = k * cos_n + _rotate_half(k) * sin_n
            attn = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                                  v.transpose(0, 1)[None], is_causal=True,
                                                  enable_gqa=s.kv_heads != s.q_heads)
            attn = attn[0].transpose(0, 1).reshape(n, s.q_heads * s.head_dim)
            x = x + self._reduce(F.linear(attn, layer["o"]))
            x = x + self._mlp(x, layer)
        last = self._rms(x[-1:], self.final_norm)
        return F.linear(last, self.lm_head) if self.lm_head is not None else last

    def new_kv_cache(self, batch: int, context_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Random K and V caches, [layers, batch, kv_heads, context, head_dim] each (never zeros)."""
        s = self.shape
        size = (s.layers, batch, s.kv_heads, context_tokens, s.head_dim)
        return self.random_like(*size), self.random_like(*size)

    def decode(self, tokens: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor) -> torch.Tensor:
        """One decode step for ``len(tokens)`` sequences, each with the caches' context; the new token's K/V
        goes into the last cache slot and attention reads the whole cache (GQA, no mask needed)."""
        s = self.shape
        b = tokens.shape[0]
        ctx = k_cache.shape[3]
        x = self._embed(tokens)
        for i, layer in enumerate(self.layers):
            q, k, v = self._split_qkv(x, layer)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            kc, vc = k_cache[i, :b], v_cache[i, :b]
            kc[:, :, ctx - 1].copy_(k)
            vc[:, :, ctx - 1].copy_(v)
            attn = F.scaled_dot_product_attention(q[:, :, None, :], kc, vc, enable_gqa=s.kv_heads != s.q_heads)
            x = x + self._reduce(F.linear(attn.reshape(b, s.q_heads * s.head_dim), layer["o"]))
            x = x + self._mlp(x, layer)
        x = self._rms(x, self.final_norm)
        if self.lm_head is None:
            return x
        logits = F.linear(x, self.lm_head)
        return self._all_gather(logits) if self._all_gather is not None else logits
