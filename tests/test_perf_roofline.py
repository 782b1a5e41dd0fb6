"""The analytical model against real H200 measurements and physical sanity."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_hardware, load_model
from planner.perf import roofline
from planner.profiler.accuracy import PREFILL_MIN_MS, measured_model, point_errors


def test_within_25_percent_of_every_shipped_h200_point(shipped) -> None:
    path = shipped / "measurements" / "h200" / "qwen3-8b.json"
    rows = point_errors(path)
    checked = 0
    for stage, point, measured, modelled in rows:
        if stage == "prefill" and measured <= PREFILL_MIN_MS:
            continue
        checked += 1
        assert abs(modelled / measured - 1) <= 0.25, (stage, point, measured, modelled)
    assert checked >= 35  # 28 decode points + 7 prefill points above 20 ms


def test_batch1_decode_is_weight_bandwidth_bound(shipped) -> None:
    data = json.loads((shipped / "measurements" / "h200" / "qwen3-8b.json").read_text())
    spec = measured_model(data)
    hw = load_hardware("h200")
    floor_ms = spec.weight_bytes / hw.hbm_bytes_per_s * 1e3
    t = roofline.decode_step_ms(spec, hw, 1, 1, 512)
    assert floor_ms < t < 2.5 * floor_ms


@pytest.mark.parametrize("model", ["qwen3-8b", "qwen3-32b", "llama-3.1-70b"])
def test_tp_speeds_up_but_sublinearly(model: str) -> None:
    spec, hw = load_model(model), load_hardware("h200")
    for fn in (lambda tp: roofline.prefill_ms(spec, hw, tp, 8192), lambda tp: roofline.decode_step_ms(spec, hw, tp, 64, 4096)):
        t1, t2, t8 = fn(1), fn(2), fn(8)
        assert t8 < t2 < t1
        assert t1 / t8 < 8  # all-reduce and fixed costs keep scaling below ideal


def test_kv_capacity_formula() -> None:
    spec, hw = load_model("qwen3-32b"), load_hardware("h200")
    eff = roofline.CALIBRATED
    for tp in (1, 2, 4):
        free = hw.memory_bytes * eff.memory_utilization - spec.weight_bytes / tp - eff.reserve_bytes
        assert roofline.kv_capacity_tokens(spec, hw, tp) == int(free / (spec.kv_bytes_per_token / tp))
    # Llama-3.1-70B weights (141 GB) do not fit one H200 at all
    assert roofline.kv_capacity_tokens(load_model("llama-3.1-70b"), hw, 1) == 0


def test_faster_gpu_is_faster() -> None:
    spec = load_model("qwen3-8b")
    assert roofline.decode_step_ms(spec, load_hardware("h200"), 1, 8, 2048) < \
        roofline.decode_step_ms(spec, load_hardware("h100"), 1, 8, 2048)
    assert roofline.prefill_ms(spec, load_hardware("b200"), 1, 8192) < roofline.prefill_ms(spec, load_hardware("h200"), 1, 8192)
