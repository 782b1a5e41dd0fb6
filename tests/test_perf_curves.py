"""Interpolation: exact on the grid, monotone everywhere, extrapolation flagged."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.perf.curves import Curve1D, DecodeCurve, PrefillCurve

ISL = [128, 512, 2048, 8192]
TTFT = [15.0, 20.0, 60.0, 260.0]


def test_prefill_exact_on_grid_and_linear_between() -> None:
    c = PrefillCurve.from_points(zip(ISL, TTFT, strict=True), gpus=1)
    for isl, ttft in zip(ISL, TTFT, strict=True):
        e = c.ttft_ms(isl)
        assert e.value == ttft and not e.extrapolated
    mid = c.ttft_ms(1280)
    assert mid.value == pytest.approx(40.0) and not mid.extrapolated


@pytest.mark.parametrize(("isl", "flag"), [(64, True), (128, False), (8192, False), (10000, True)],
                         ids=["below", "first", "last", "above"])
def test_extrapolation_is_flagged(isl: int, flag: bool) -> None:
    c = PrefillCurve.from_points(zip(ISL, TTFT, strict=True), gpus=1)
    assert c.ttft_ms(isl).extrapolated is flag


def test_above_grid_extends_last_slope() -> None:
    c = PrefillCurve.from_points(zip(ISL, TTFT, strict=True), gpus=1)
    slope = (260.0 - 60.0) / (8192 - 2048)
    assert c.ttft_ms(9192).value == pytest.approx(260.0 + slope * 1000)


def test_noisy_points_are_made_monotone() -> None:
    # Real measurements are noisy (shared H200 data: 128 tokens took longer than 256).
    c = Curve1D.from_points([128, 256, 512], [15.8, 14.7, 20.0])
    assert c(256).value >= c(128).value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 100_000), st.floats(0.1, 1e4)), min_size=1, max_size=12),
       st.floats(1, 200_000), st.floats(1, 200_000))
def test_curve_monotone_property(points, a, b) -> None:
    c = Curve1D.from_points([p[0] for p in points], [p[1] for p in points])
    lo, hi = min(a, b), max(a, b)
    assert c(lo).value <= c(hi).value + 1e-9


DECODE = [(b, c, 5.0 + 0.02 * b + 0.0005 * b * c / 100) for c in (512, 2048, 8192) for b in (1, 8, 64)]
# ragged: the longest context only has small batches (as in the shared measurements)
RAGGED = DECODE + [(1, 32768, 7.0), (4, 32768, 10.0)]


def _decode(points=RAGGED) -> DecodeCurve:
    return DecodeCurve.from_points(points, gpus=1, kv_capacity_tokens=1_000_000, max_batch=256)


def test_decode_exact_on_grid() -> None:
    d = _decode(DECODE)
    for b, c, v in DECODE:
        e = d.itl_ms(b, c)
        assert e.value == pytest.approx(v) and not e.extrapolated


def test_decode_ragged_grid_flags_and_stays_monotone_in_context() -> None:
    d = _decode()
    # batch 64 at 32768 is outside that level's batch range: extrapolated, and never below context 8192's
    e = d.itl_ms(64, 32768)
    assert e.extrapolated
    assert e.value >= d.itl_ms(64, 8192).value


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 512), st.integers(1, 512), st.floats(100, 60_000), st.floats(100, 60_000))
def test_decode_monotone_in_batch_and_context(b1, b2, c1, c2) -> None:
    d = _decode()
    blo, bhi = sorted((b1, b2))
    clo, chi = sorted((c1, c2))
    assert d.itl_ms(blo, clo).value <= d.itl_ms(bhi, clo).value + 1e-9
    assert d.itl_ms(blo, clo).value <= d.itl_ms(blo, chi).value + 1e-9


def test_max_batch_meeting_respects_itl_and_kv() -> None:
    d = DecodeCurve.from_points(DECODE, gpus=1, kv_capacity_tokens=64 * 2048, max_batch=256)
    b = d.max_batch_meeting(6.0, 2048)
    assert d.itl_ms(b, 2048).value <= 6.0 < d.itl_ms(b + 1, 2048).value
    assert d.max_batch_meeting(1e9, 2048) == 64  # KV-bound: 64 sequences of 2048 tokens
    assert d.max_batch_meeting(1.0, 2048) == 0  # even batch 1 misses
