"""History preparation and the deterministic memo anchor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.forecast.history import NoHistory, Series, prepare
from planner.forecast.memo import BoundedMemo, anchor_index, memo_key

NAN = math.nan


@pytest.mark.parametrize("times,values,expected", [
    pytest.param([0, 60, 120], [1, 2, 3], [1, 2, 3], id="regular"),
    pytest.param([0, 60, 180], [1, 2, 4], [1, 2, 3, 4], id="gap-interpolated"),
    pytest.param([0, 60, 120, 180], [1, NAN, 3, 4], [1, 2, 3, 4], id="nan-interpolated"),
    pytest.param([0, 60, 120, 180], [1, -5, 3, 4], [1, 2, 3, 4], id="negative-dropped"),
    pytest.param([120, 0, 60], [3, 1, 2], [1, 2, 3], id="unsorted"),
    pytest.param([0, 60, 60, 120], [1, 9, 2, 3], [1, 2, 3], id="duplicate-last-wins"),
    pytest.param([0, 60, 120, 180, 240], [0, 0, 5, 6, 7], [5, 6, 7], id="leading-zeros-dropped"),
    pytest.param([0, 60, 120, 180], [5, 0, 0, 7], [5, 0, 0, 7], id="inner-zeros-kept"),
])
def test_prepare(times: list[float], values: list[float], expected: list[float]) -> None:
    s = prepare(times, values)
    assert isinstance(s, Series)
    np.testing.assert_allclose(s.values, expected)
    assert s.step_s == 60.0


@pytest.mark.parametrize("values,reason,fallback", [
    pytest.param([], "empty", NAN, id="empty"),
    pytest.param([NAN, NAN], "NaN", NAN, id="all-nan"),
    pytest.param([0.0, 0.0, 0.0], "all-zero", 0.0, id="all-zero"),
    pytest.param([3.0], "single-point", 3.0, id="single"),
])
def test_prepare_no_history(values: list[float], reason: str, fallback: float) -> None:
    out = prepare(np.arange(len(values)) * 60.0, values)
    assert isinstance(out, NoHistory)
    assert reason in out.reason
    assert (math.isnan(out.fallback) and math.isnan(fallback)) or out.fallback == fallback


def test_length_mismatch_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="times_s"):
        prepare([0.0, 1.0], [1.0])


def test_horizon_steps_round_up() -> None:
    s = Series(0.0, 60.0, np.ones(5))
    assert [s.steps(h) for h in (0.0, 30.0, 60.0, 61.0, 180.0)] == [1, 1, 1, 2, 3]


@pytest.mark.parametrize("n,every,expected", [
    pytest.param(100, 20, 80, id="last-multiple"),  # last index 99; the last multiple of 20 is 80
    pytest.param(10, 20, 5, id="young-series-halves-the-period"),  # 20 -> 10 -> 5 steps
    pytest.param(45, 20, 40, id="mid"),
])
def test_anchor_index(n: int, every: int, expected: int) -> None:
    s = Series(0.0, 1.0, np.arange(n, dtype=float))
    a = anchor_index(s, every)
    assert 2 * (a + 1) >= n
    assert a == expected


def test_memo_key_ignores_points_older_than_the_fingerprint() -> None:
    base = np.arange(200, dtype=float)
    other = base.copy()
    other[:10] = -1.0
    a, b = Series(0.0, 1.0, base), Series(0.0, 1.0, other)
    assert memo_key(a, 150, "x") == memo_key(b, 150, "x")
    assert memo_key(a, 150, "x") != memo_key(a, 149, "x")


def test_bounded_memo_evicts_oldest() -> None:
    memo: BoundedMemo[int] = BoundedMemo(2)
    for key in ("a", "b", "c"):
        memo.get_or_make(key, lambda key=key: ord(key))
    assert len(memo) == 2
    assert memo.get_or_make("a", lambda: -1) == -1  # "a" was evicted and re-made
