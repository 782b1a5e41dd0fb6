"""SLA attainment from a latency histogram's window counts: interpolation between bounds, the +Inf bucket,
and what is not measured (None, never all met or all missed)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.emulator.vllm_metrics import TTFT_BUCKETS_S
from planner.sources.attainment import attainment

INF = math.inf
NAN = math.nan
# 100 requests: 80 at or under 0.1 s, 100 at or under 0.25 s, none past 0.25 s.
TIGHT = [(0.1, 80.0), (0.25, 100.0), (0.5, 100.0), (INF, 100.0)]
# 100 requests, 5 of them past the last finite bound (0.5 s).
TAIL = [(0.1, 80.0), (0.25, 90.0), (0.5, 95.0), (INF, 100.0)]

CASES = [
    # (id, count, cumulative (le s, count), target ms, (counted, met) or None)
    ("on-a-bound", 100, TIGHT, 100, (100, 80)),  # le is inclusive: exact
    ("between-bounds", 100, TIGHT, 200, (100, 80 + 20 * (0.2 - 0.1) / (0.25 - 0.1))),
    ("below-the-first-bound", 100, TIGHT, 50, (100, 40)),  # the first bucket starts at 0
    ("on-the-last-finite-bound", 100, TAIL, 500, (100, 95)),
    ("above-the-last-finite-bound", 100, TAIL, 2000, (100, 95)),  # the +Inf bucket's 5 count as missed
    ("unsorted-samples", 100, TIGHT[::-1], 200, (100, 80 + 20 * (0.2 - 0.1) / (0.25 - 0.1))),
    ("empty-window", 0, [(0.1, 0.0), (INF, 0.0)], 200, (0, 0)),
    ("empty-window-no-bucket-series", 0, [], 200, (0, 0)),  # the count series exists: measured zero
    ("met-clamped-to-counted", 90, TIGHT, 300, (90, 90)),  # a bucket series the count series lacks
    ("no-target", 100, TIGHT, None, None),
    ("no-count-series", None, TIGHT, 200, None),
    ("nan-count", NAN, TIGHT, 200, None),
    ("inf-count", INF, TIGHT, 200, None),
    ("no-bucket-series", 100, [], 200, None),
    ("only-the-inf-bucket", 100, [(INF, 100.0)], 200, None),  # nothing known about any latency
    ("nan-bucket", 100, [(0.1, NAN), (0.25, 100.0), (INF, 100.0)], 200, None),
    ("counts-fall-with-le", 100, [(0.1, 90.0), (0.25, 80.0), (INF, 100.0)], 200, None),
]


@pytest.mark.parametrize(("count", "cumulative", "target", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_attainment(count: float | None, cumulative: list[tuple[float, float]], target: float | None,
                    want: tuple[float, float] | None) -> None:
    got = attainment(count, cumulative, target)
    if want is None:
        assert got is None
    else:
        assert got == pytest.approx(want)


def cumulative_of(latencies_s: list[float], bounds_s: tuple[float, ...]) -> list[tuple[float, float]]:
    return [(b, float(sum(1 for v in latencies_s if v <= b))) for b in (*bounds_s, INF)]


latencies = st.lists(st.floats(min_value=0, max_value=3000, allow_nan=False), min_size=1, max_size=60)
targets_ms = st.floats(min_value=0.01, max_value=5e6, allow_nan=False)


@given(values=latencies, target=targets_ms)
def test_property_met_is_within_the_bucket_around_the_target(values: list[float], target: float) -> None:
    """The error is at most the observations in the bucket holding the target; none on a bound; past the
    last finite bound met is the count up to it (a lower bound)."""
    got = attainment(float(len(values)), cumulative_of(values, TTFT_BUCKETS_S), target)
    assert got is not None
    counted, met = got
    assert counted == len(values) and 0 <= met <= counted
    t = target / 1e3
    true_met = sum(1 for v in values if v <= t)
    if t > TTFT_BUCKETS_S[-1]:  # the +Inf bucket cannot be split: its observations count as missed
        assert met == sum(1 for v in values if v <= TTFT_BUCKETS_S[-1]) <= true_met
        return
    lower = max((b for b in TTFT_BUCKETS_S if b < t), default=0.0)
    upper = min(b for b in TTFT_BUCKETS_S if b >= t)
    at_lower = sum(1 for v in values if v <= lower) if lower > 0 else 0
    at_upper = sum(1 for v in values if v <= upper)
    assert at_lower - 1e-9 <= met <= at_upper + 1e-9
    assert abs(met - true_met) <= at_upper - at_lower + 1e-9
    if t in TTFT_BUCKETS_S:
        assert met == pytest.approx(true_met)


@given(cumulative=st.lists(st.tuples(st.sampled_from((*TTFT_BUCKETS_S, INF)),
                                     st.floats(min_value=0, max_value=1e6, allow_nan=False)), max_size=25),
       count=st.floats(min_value=0, max_value=1e6, allow_nan=False), target=targets_ms)
def test_property_never_more_met_than_counted(cumulative: list[tuple[float, float]], count: float,
                                              target: float) -> None:
    got = attainment(count, cumulative, target)
    if got is not None:
        assert 0 <= got[1] <= got[0] == count
