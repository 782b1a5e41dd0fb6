"""`planner up`'s attainment from the engines' histograms: exact on a bucket bound, bounded between two."""

from __future__ import annotations

import math

import pytest

from planner.up.summary import bucket_bounds, measured_attainment

# vLLM's ITL bounds near the target (seconds) and cumulative counts: 1,000 gaps, all but 10 within 25 ms.
ITL = [(0.01, 5.0), (0.025, 990.0), (0.05, 1000.0), (math.inf, 1000.0)]


@pytest.mark.parametrize(("target_ms", "expected"), [
    # 18 ms sits in (10, 25]: the interpolation reads 5 + 985 x 8/15 = 530.3 (53.03 %), the truth is between
    # 0.5 % (within 10 ms) and 99 % (within 25 ms).
    (18.0, {"interpolated": True, "bucket_ms": [10.0, 25.0], "within_lower_pct": 0.5, "within_upper_pct": 99.0}),
    (25.0, {"interpolated": False}),  # on a bound: exact
    (5.0, {"interpolated": True, "bucket_ms": [0.0, 10.0], "within_lower_pct": 0.0, "within_upper_pct": 0.5}),
    (80.0, {"interpolated": True, "bucket_ms": [50.0, math.inf], "within_lower_pct": 100.0,
            "within_upper_pct": 100.0}),
])
def test_bucket_bounds(target_ms: float, expected: dict) -> None:
    assert bucket_bounds(ITL, target_ms, 1000.0) == expected


def test_no_buckets_no_bounds() -> None:
    assert bucket_bounds([], 18.0, 10.0) == {}


def test_the_summary_carries_the_bounds_beside_the_interpolated_share() -> None:
    def query(expr: str) -> list[dict]:  # what Prometheus answers for the run's window
        if "_count" in expr:
            return [{"value": [0, "1000"]}]
        if "inter_token" in expr:
            return [{"metric": {"le": str(le) if math.isfinite(le) else "+Inf"}, "value": [0, str(c)]} for le, c in ITL]
        return [{"metric": {"le": le}, "value": [0, c]} for le, c in (("0.5", "900"), ("1.0", "1000"), ("+Inf", "1000"))]

    got = measured_attainment(query, 120.0, {"ttft_ms": 1000.0, "itl_ms": 18.0}, "prefill", "decode")
    assert got["itl"]["within_sla_pct"] == 53.03 and got["itl"]["bucket_ms"] == [10.0, 25.0]
    assert got["itl"]["within_upper_pct"] == 99.0
    assert got["ttft"]["within_sla_pct"] == 100.0 and got["ttft"]["interpolated"] is False  # 1,000 ms is a bound
