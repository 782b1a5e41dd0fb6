"""A hand-made profile of the tiny random-weight model vLLM's CPU build serves (planner/testing/vllm_cpu.py):
not a measurement, a known decision from real metrics for `planner up --engine vllm` and the engine tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_tiny_cpu_profile(path: Path) -> Path:
    """A hand-made profile for the tiny vLLM CPU model, shaped so that the engine tests' load needs two
    replicas and no load one (not a measurement): every prompt takes ~1 s to prefill, so from ~0.5 req/s on
    one replica misses TTFT 3 s at p95 and two are needed (at 1.2 req/s one is past saturation); decode is
    ~10-25 ms per step, so one decode replica carries the decode side. The real engine is much faster than
    this - the point is a known decision from real metrics, with calibration off. ``planner plan`` on it:
    0.3 req/s -> 1, 0.5-1.0 -> 2, more -> 3 (clamped by the tests' ceiling of 2)."""
    prefill = [(16, 1000.0), (256, 1020.0), (1024, 1100.0), (4096, 1400.0)]
    decode = [(b, c, 10.0 + 0.6 * b + c / 1024) for b in (1, 2, 4, 8, 16) for c in (64, 256, 1024, 4096)]
    profile = {
        "schema": "planner.profile/v1",
        "model": {"name": "tiny-qwen3", "kv_bytes_per_token": 1024, "params": 3_000_000, "weight_bytes": 6_000_000,
                  "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512,
                  "vocab": 4096, "dtype_bytes": 2, "max_context_tokens": 4096},
        "hardware": {"gpu": "cpu", "memory_bytes": 64e6, "hbm_bytes_per_s": 10e9, "bf16_flops": 100e9,
                     "link_bytes_per_s": 1e9, "nic_gbps": 10.0, "source": "hand-made for the engine tests"},
        "provenance": {"backend": "analytical", "created_at": "2026-12-01T00:00:00+00:00", "planner_version": "0.1.0",
                       "notes": "hand-made (planner/up/tiny_profile.py): a known decision from real metrics"},
        "prefill": [{"tp": 1, "gpus": 1, "points": [{"isl": i, "ttft_ms": ms, "tokens_per_s_per_gpu": i / ms * 1e3}
                                                    for i, ms in prefill]}],
        "decode": [{"tp": 1, "gpus": 1, "kv_capacity_tokens": 65536, "max_batch": 16,
                    "points": [{"batch": b, "context_tokens": c, "itl_ms": round(ms, 3),
                                "tokens_per_s_per_gpu": round(b / ms * 1e3, 3)} for b, c, ms in decode]}],
    }
    path.write_text(json.dumps(profile, indent=1))
    return path
