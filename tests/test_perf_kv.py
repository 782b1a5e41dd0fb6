"""KV transfer and aggregated-vs-disaggregated advice against public measurements."""

from __future__ import annotations

import pytest

from planner.catalog import load_model
from planner.perf.kv import LINKS_BYTES_PER_S, advise, gbps_to_bytes_per_s, transfer_s


def test_qwen3_06b_3000_tokens_over_1gbe_adds_3_3_s() -> None:
    kv = load_model("qwen3-0.6b").kv_bytes_per_token
    assert transfer_s(3000, kv, LINKS_BYTES_PER_S["1gbe-measured"]) == pytest.approx(3.3, abs=0.1)


def test_qwen3_32b_8000_tokens_over_100gbe_adds_0_17_s() -> None:
    kv = load_model("qwen3-32b").kv_bytes_per_token
    assert transfer_s(8000, kv, gbps_to_bytes_per_s(100)) == pytest.approx(0.17, abs=0.01)


def test_four_concurrent_transfers_each_take_four_times_longer() -> None:
    one = transfer_s(3000, 114_688, 104e6)
    assert transfer_s(3000, 114_688, 104e6, concurrent=4) == pytest.approx(4 * one)


ADVICE = [
    # isl, kv B/token, link B/s, prefill ms, ttft target, itl target, expected
    (3000, 114_688, 104e6, 40.0, 1000.0, 30.0, "aggregated"),  # slow link: 3.3 s transfer
    (8000, 262_144, 12.5e9, 900.0, 2000.0, 40.0, "disaggregated"),  # long prompt, fast link
    (1000, 131_072, 50e9, 30.0, 500.0, 30.0, "aggregated"),  # short prompt: little interference
    (4000, 131_072, 50e9, 120.0, 500.0, 30.0, "disaggregated"),  # 4k tokens on an 8B: break-even passed
]


@pytest.mark.parametrize(("isl", "kv", "link", "pre", "ttft", "itl", "mode"), ADVICE,
                         ids=["0.6b-1gbe", "32b-8k-100gbe", "8b-1k", "8b-4k"])
def test_advice(isl, kv, link, pre, ttft, itl, mode) -> None:
    a = advise(isl, kv, link, pre, ttft, itl)
    assert a.mode == mode
    assert a.transfer_ms == pytest.approx(isl * kv / link * 1e3)
