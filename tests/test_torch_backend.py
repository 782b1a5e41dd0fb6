"""The torch profiler backend on the CPU with a tiny decoder: the same code path the H200 runs, device cpu."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (optional extra: pip install 'planner[torch]')")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from planner.perf import roofline  # noqa: E402
from planner.perf.hardware import HardwareSpec  # noqa: E402
from planner.perf.model import ModelSpec  # noqa: E402
from planner.profiler.grids import SweepRequest  # noqa: E402
from planner.profiler.torch_backend import RAW_LOG_ENV, profile_torch  # noqa: E402
from planner.profiler.torch_decoder import ShardedDecoder, ShardShape  # noqa: E402
from planner.profiler.torch_measure import MeasureConfig, measure_rank  # noqa: E402

TINY = ModelSpec(name="tiny", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=96,
                 max_context_tokens=1024)
H200 = HardwareSpec(name="h200", memory_bytes=141e9, hbm_bytes_per_s=4.8e12, bf16_flops=989e12, fp8_flops=1979e12,
                    link_bytes_per_s=450e9, nic_gbps=400)


def _req(**kw) -> SweepRequest:
    base = dict(model="tiny", gpu="h200", tp=(1,), isl=64, osl=16, ttft_ms=1e5, itl_ms=1e5, isl_grid=(16, 64),
                batch_grid=(1, 4), context_grid=(32, 128), device="cpu", warmup=1, iters=2)
    return SweepRequest(**{**base, **kw})


@pytest.fixture(scope="module")
def cpu_profile():
    return profile_torch(TINY, H200, _req())


def test_profile_has_every_grid_point_and_provenance(cpu_profile) -> None:
    p = cpu_profile
    assert p.provenance.backend == "torch"
    assert p.provenance.software["torch"] == torch.__version__
    assert p.provenance.software["device"] == "cpu"
    assert {"gpu", "python", "warmup", "iters"} <= set(p.provenance.software)
    assert "LM head included" in p.provenance.notes
    assert [pt.isl for pt in p.prefill[0].points] == [16, 64]
    assert sorted((pt.batch, pt.context_tokens) for pt in p.decode[0].points) == [(1, 32), (1, 128), (4, 32), (4, 128)]
    assert all(pt.ttft_ms > 0 for pt in p.prefill[0].points)
    assert p.selection is not None and p.selection.prefill.meets_sla and p.selection.decode.meets_sla


def test_cpu_kv_capacity_follows_the_roofline_definition(cpu_profile) -> None:
    # CPU: (memory x utilisation - weights - reserve) / fp32 KV bytes per token (twice the bf16 figure).
    eff = roofline.CALIBRATED
    weights_fp32 = TINY.params * 4
    expected = int((141e9 * eff.memory_utilization - weights_fp32 - eff.reserve_bytes) / (TINY.kv_bytes_per_token * 2))
    assert cpu_profile.decode[0].kv_capacity_tokens == expected


def test_points_over_kv_capacity_are_skipped_and_named() -> None:
    # 2.0 GB reserve + ~1.2 MB: room for 300 tokens of fp32 KV (4 KiB each) - 4x128 does not fit, 1x128 does.
    eff = roofline.CALIBRATED
    per_token = TINY.kv_bytes_per_token * 2
    weights = TINY.params * 4
    memory = (eff.reserve_bytes + weights + 300 * per_token) / eff.memory_utilization
    p = profile_torch(TINY, replace(H200, memory_bytes=memory), _req())
    pts = {(pt.batch, pt.context_tokens) for pt in p.decode[0].points}
    assert pts == {(1, 32), (4, 32), (1, 128)}
    assert "4x128" in p.provenance.notes and "skipped" in p.provenance.notes


def test_raw_log_gets_every_point(tmp_path, monkeypatch) -> None:
    log = tmp_path / "raw.jsonl"
    monkeypatch.setenv(RAW_LOG_ENV, str(log))
    profile_torch(TINY, H200, _req(isl_grid=(16,), batch_grid=(2,), context_grid=(32,)))
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds == ["prefill", "decode", "sweep"]


def test_without_lm_head_the_decoder_has_no_vocabulary() -> None:
    p = profile_torch(TINY, H200, _req(include_lm_head=False, isl_grid=(16,), batch_grid=(1,), context_grid=(32,)))
    assert "LM head left out" in p.provenance.notes
    assert p.decode[0].kv_capacity_tokens > 0


def test_tp2_runs_two_gloo_ranks_with_the_same_code_path() -> None:
    p = profile_torch(TINY, H200, _req(tp=(1, 2), isl_grid=(16,), batch_grid=(1, 2), context_grid=(32,)))
    assert [s.tp for s in p.decode] == [1, 2]
    assert p.decode[1].gpus == 2 and len(p.decode[1].points) == 2
    # KV heads split over 2 ranks: each holds half the cache, so about twice the tokens fit.
    assert p.decode[1].kv_capacity_tokens > 1.9 * p.decode[0].kv_capacity_tokens


SHARDS = [  # (tp, q heads, kv heads per rank: replicated once tp > kv heads, intermediate per rank)
    (1, 4, 2, 128),
    (2, 2, 1, 64),
    (4, 1, 1, 32),
]


@pytest.mark.parametrize(("tp", "q", "kv", "inter"), SHARDS, ids=[f"tp{s[0]}" for s in SHARDS])
def test_shard_shapes(tp: int, q: int, kv: int, inter: int) -> None:
    s = ShardShape.of(TINY, tp)
    assert (s.q_heads, s.kv_heads, s.intermediate, s.vocab) == (q, kv, inter, TINY.vocab // tp)


@given(kv_heads=st.sampled_from([1, 2, 4, 8]), group=st.sampled_from([1, 2, 4, 8]),
       tp=st.sampled_from([1, 2, 4, 8, 16]))
def test_shard_kv_matches_the_roofline_per_gpu_kv(kv_heads: int, group: int, tp: int) -> None:
    """Every rank's KV cache is what planner.perf sizes capacity with, and the query heads split evenly."""
    m = replace(TINY, heads=kv_heads * group, kv_heads=kv_heads)
    if m.check_tp(tp):
        with pytest.raises(ValueError):
            ShardShape.of(m, tp)
        return
    s = ShardShape.of(m, tp)
    assert s.q_heads * tp == m.heads
    assert s.kv_bytes_per_token == m.kv_bytes_per_token_per_gpu(tp)


def test_shard_shape_rejects_what_the_model_cannot_split() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        ShardShape.of(TINY, 3)


def test_tp1_decoder_holds_exactly_the_models_parameters() -> None:
    dec = ShardedDecoder(ShardShape.of(TINY, 1), "cpu", torch.float32)
    assert dec.weight_bytes() == TINY.params * 4


def test_decoder_outputs_are_finite_logits() -> None:
    dec = ShardedDecoder(ShardShape.of(TINY, 1), "cpu", torch.float32)
    from planner.profiler.torch_decoder import rope_tables

    cos, sin = rope_tables(64, TINY.head_dim, "cpu", torch.float32)
    with torch.inference_mode():
        pre = dec.prefill(dec.random_tokens(64), cos, sin)
        k, v = dec.new_kv_cache(3, 40)
        out = dec.decode(dec.random_tokens(3), k, v, cos[39].view(1, 1, -1), sin[39].view(1, 1, -1))
    assert pre is not None and pre.shape == (1, TINY.vocab) and torch.isfinite(pre).all()
    assert out.shape == (3, TINY.vocab) and torch.isfinite(out).all()
    assert torch.isfinite(k).all() and not (k == 0).all()  # the cache is random, never zeros


def test_measure_rank_counts_each_point_once() -> None:
    cfg = MeasureConfig(device="cpu", warmup=0, iters=1, memory_bytes_hint=141e9)
    seen: list[str] = []
    r = measure_rank(TINY, 1, [8, 16], [1], [16, 32], cfg, on_point=lambda kind, data: seen.append(kind))
    assert seen == ["prefill", "prefill", "decode", "decode"]
    assert [isl for isl, _ in r.prefill] == [8, 16] and r.skipped == []
