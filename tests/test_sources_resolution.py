"""Bucket resolution around SLA targets, on vLLM's real TTFT/ITL bucket layouts (the emulator's constants,
which tests/test_engine_vllm.py checks against a real vLLM 0.32 server)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.emulator.vllm_metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S
from planner.sources.resolution import RESOLVED_MAX_RATIO, bracket

INF = math.inf
CASES = [
    # (layout, target ms, bracket ms, resolved)
    ("itl-40ms", ITL_BUCKETS_S, 40, (25, 50), False),  # the case: 62.5 % of the target
    ("itl-30ms", ITL_BUCKETS_S, 30, (25, 50), False),
    ("itl-on-a-bound", ITL_BUCKETS_S, 50, (25, 50), False),  # le is inclusive: 50 closes (25, 50]
    ("itl-100ms", ITL_BUCKETS_S, 100, (75, 100), True),  # exactly 25 %: resolved
    ("itl-below-first-bound", ITL_BUCKETS_S, 8, (0, 10), False),
    ("itl-past-last-bound", ITL_BUCKETS_S, 90_000, (80_000, INF), False),
    ("ttft-200ms", TTFT_BUCKETS_S, 200, (100, 250), False),  # no bound between 0.1 and 0.25 s
    ("ttft-1s", TTFT_BUCKETS_S, 1000, (750, 1000), True),
    ("ttft-2s", TTFT_BUCKETS_S, 2000, (1000, 2500), False),
    ("ttft-50ms", TTFT_BUCKETS_S, 50, (40, 60), False),
    ("ttft-1ms", TTFT_BUCKETS_S, 1, (0, 1), False),
]


@pytest.mark.parametrize(("bounds", "target", "want", "resolved"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bracket_on_vllm_layouts(bounds: tuple[float, ...], target: float, want: tuple[float, float],
                                 resolved: bool) -> None:
    got = bracket((*bounds, INF), target)  # the +Inf bucket comes back from Prometheus too
    assert got is not None
    assert (got.lower_ms, got.upper_ms) == pytest.approx(want)
    assert got.ratio == pytest.approx((want[1] - want[0]) / target)
    assert got.resolved is resolved


def test_no_bucket_series_is_not_assessed() -> None:
    assert bracket([], 40) is None


def test_only_the_inf_bucket_resolves_nothing() -> None:
    got = bracket([INF], 40)
    assert got is not None and got.ratio == INF and not got.resolved


@pytest.mark.parametrize("target", [0, -1, math.nan, INF])
def test_bad_target_is_an_error(target: float) -> None:
    with pytest.raises(ValueError, match="target_ms"):
        bracket(ITL_BUCKETS_S, target)


bounds_s = st.lists(st.floats(min_value=1e-4, max_value=1e4, allow_nan=False), min_size=1, max_size=30)


@given(bounds=bounds_s, target=st.floats(min_value=1e-3, max_value=1e8, allow_nan=False))
def test_property_the_bracket_is_the_bucket_holding_the_target(bounds: list[float], target: float) -> None:
    got = bracket(bounds, target)
    assert got is not None
    ms = sorted(b * 1e3 for b in bounds)
    assert got.lower_ms < target <= got.upper_ms
    assert got.lower_ms in (0.0, *ms) and got.upper_ms in (*ms, INF)
    assert not any(got.lower_ms < b < got.upper_ms for b in ms)  # no bound inside: it is one bucket
    assert got.resolved == (got.ratio <= RESOLVED_MAX_RATIO)
