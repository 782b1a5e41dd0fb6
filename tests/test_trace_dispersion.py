"""The arrivals' index of dispersion (records.arrival_dispersion): what it reads on the arrival processes it
tells apart, and where a backtest reports it."""

from __future__ import annotations

import numpy as np
import pytest

from planner.sim.evaluate.report import _dispersion_md
from planner.sim.traces.records import RequestTrace, arrival_dispersion


def _poisson(rate_rps: float, duration_s: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.uniform(0.0, duration_s, rng.poisson(rate_rps * duration_s)))


def _clumped(clump: int, rate_rps: float, duration_s: float, seed: int = 0) -> np.ndarray:
    """Clumps of ``clump`` requests at one instant, the clumps Poisson: a compound Poisson process, whose
    index of dispersion is E[N^2] / E[N] = clump for a fixed clump size."""
    starts = _poisson(rate_rps / clump, duration_s, seed)
    return np.repeat(starts, clump)


@pytest.mark.parametrize(("arrivals", "expected", "tolerance"), [
    (_poisson(20.0, 3600.0), 1.0, 0.08),  # Poisson: variance = mean
    (_poisson(2.0, 3600.0, seed=1), 1.0, 0.15),  # sparser, noisier, still 1
    (_clumped(5, 20.0, 3600.0), 5.0, 0.6),
    (_clumped(10, 20.0, 3600.0, seed=2), 10.0, 1.2),
    (np.arange(0.0, 3600.0, 0.05), 0.0, 1e-9),  # evenly spaced: every second holds 20, no spread at all
])
def test_the_index_reads_what_the_arrival_process_is(arrivals: np.ndarray, expected: float, tolerance: float) -> None:
    value = arrival_dispersion(arrivals)
    assert value is not None and value == pytest.approx(expected, abs=tolerance)


def test_a_rate_that_moves_between_minutes_is_not_read_as_clumps() -> None:
    """Minute-long steps between 5 and 50 req/s: every minute is Poisson within, so the index stays near 1,
    where the spread of all 1-s counts together would read the steps (about 20)."""
    parts = [_poisson(5.0 if i % 2 else 50.0, 60.0, seed=i) + 60.0 * i for i in range(60)]
    arrivals = np.concatenate(parts)
    counts = np.bincount(np.floor(arrivals).astype(int))
    assert counts.var() / counts.mean() > 10.0
    value = arrival_dispersion(arrivals)
    assert value is not None and value == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("arrivals", [np.zeros(0), np.array([1.0, 2.0, 3.0]), np.arange(0.0, 30.0, 0.1),
                                      _poisson(0.1, 3600.0)])
def test_unknown_where_no_minute_holds_enough_arrivals(arrivals: np.ndarray) -> None:
    """No arrivals, under a minute of them, or minutes of a handful each: None, never a number from nothing."""
    assert arrival_dispersion(arrivals) is None


def test_the_trace_summary_carries_it_and_the_report_flags_clumps() -> None:
    t = _clumped(8, 20.0, 600.0)
    trace = RequestTrace(t, np.full(len(t), 100), np.full(len(t), 10))
    index = trace.summary()["arrival_dispersion_1s"]
    assert isinstance(index, float) and index > 5.0
    clumped, steady, unknown = _dispersion_md(index), _dispersion_md(1.03), _dispersion_md(None)
    assert "clumps" in clumped[0] and "M/G/c" in clumped[0] and f"{index:.2f}" in clumped[0]
    assert steady[0].startswith("Arrivals: index of dispersion 1.03") and "clumps" not in steady[0]
    assert unknown == []
