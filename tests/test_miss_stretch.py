"""Where a replay's misses came from: the five minutes of the scored window with the most of them, the arrival
rate there against the minutes before, in report.json, report.md, the terminal and `planner bench hours`."""

from __future__ import annotations

from io import StringIO

import numpy as np
import pytest
from rich.console import Console

from planner.bench.hours import summary, summary_lines
from planner.sim.evaluate.miss_stretch import describe, worst_stretch
from planner.sim.evaluate.report import MISSES_TITLE, miss_lines, render_markdown
from planner.sim.evaluate.summary_table import render_summary
from tests.test_bench_hours import _hour
from tests.test_sim_report_pools import HEAD, entry


def arrivals(*legs: tuple[float, float, float]) -> np.ndarray:
    """Evenly spaced arrivals: (from s, to s, req/s) per leg."""
    return np.concatenate([np.arange(a, b, 1.0 / rate) for a, b, rate in legs])


# 10 req/s for 15 minutes, then 20 req/s: the replay's first 10 minutes are its warm-up (score from 600 s).
STEP = arrivals((0.0, 900.0, 10.0), (900.0, 1800.0, 20.0))


@pytest.mark.parametrize("missed_between, score_from_s, end_s, want", [
    # The step's first 100 s miss: the stretch starts at the step (5 min into the scored window), all of them
    # in it, the rate there twice the ten minutes before.
    pytest.param((900.0, 1000.0), 600.0, 1800.0,
                 {"start_s": 300.0, "misses": 2000, "share_of_misses": 1.0, "rate_vs_before": 2.0, "before_s": 600.0},
                 id="a-step"),
    # Misses off the 30 s grid: the stretch starts on the grid step at or before the first one.
    pytest.param((1015.0, 1100.0), 600.0, 1800.0,
                 {"start_s": 390.0, "misses": 1700, "share_of_misses": 1.0, "before_s": 600.0}, id="on-the-grid"),
    # Misses at the scored window's end: the stretch keeps its five minutes inside the window.
    pytest.param((1750.0, 1800.0), 600.0, 1800.0, {"start_s": 900.0, "misses": 1000, "rate_vs_before": 1.0},
                 id="at-the-end"),
    # Misses in the warm-up are not the scored window's.
    pytest.param((500.0, 700.0), 600.0, 1800.0, {"start_s": 0.0, "misses": 1000, "before_s": 600.0},
                 id="warm-up-not-counted"),
    # No warm-up and misses from the first second: no minutes before to read a rate against.
    pytest.param((0.0, 50.0), 0.0, 1800.0, {"start_s": 0.0, "misses": 500, "rate_vs_before": None, "before_s": 0.0},
                 id="nothing-before"),
    # A scored window shorter than five minutes: one stretch, from its start; its rate over what it holds.
    pytest.param((1700.0, 1750.0), 1650.0, 1800.0,
                 {"start_s": 0.0, "misses": 1000, "length_s": 300.0, "requests": 3000, "rate_vs_before": 1.0},
                 id="short-window"),
])
def test_worst_stretch(missed_between: tuple[float, float], score_from_s: float, end_s: float, want: dict) -> None:
    missed = (STEP >= missed_between[0]) & (STEP < missed_between[1])
    got = worst_stretch(STEP, missed, score_from_s, end_s)
    assert got is not None
    for key, value in want.items():
        assert got[key] == (pytest.approx(value, abs=2) if isinstance(value, float) and key != "rate_vs_before"
                            else pytest.approx(value, rel=0.01) if value is not None else None), key


def test_the_stretch_with_most_misses_wins_over_an_earlier_thin_spread() -> None:
    """A miss a minute all hour and 3,000 in two minutes: the two minutes are the stretch, with their share."""
    thin = np.isin(np.arange(len(STEP)), np.searchsorted(STEP, np.arange(600.0, 1800.0, 60.0)))
    burst = (STEP >= 1500.0) & (STEP < 1575.0)
    got = worst_stretch(STEP, thin | burst, 600.0, 1800.0)
    assert got is not None and got["start_s"] in (870.0, 900.0)
    assert got["misses"] >= 1500 and got["share_of_misses"] == pytest.approx(got["misses"] / (thin | burst)[
        STEP >= 600.0].sum(), abs=1e-4)


def test_no_scored_miss_is_none_and_lengths_must_agree() -> None:
    assert worst_stretch(STEP, np.zeros(len(STEP), bool), 600.0, 1800.0) is None
    assert worst_stretch(STEP, STEP < 600.0, 600.0, 1800.0) is None  # only the warm-up missed
    with pytest.raises(ValueError, match="differ in length"):
        worst_stretch(STEP, np.zeros(3, bool), 600.0, 1800.0)


def test_describe_names_the_minutes_the_share_and_the_rate() -> None:
    line = describe({"start_s": 600.0, "length_s": 300.0, "misses": 10144, "share_of_misses": 0.95,
                     "requests": 13000, "rate_vs_before": 1.96, "before_s": 600.0})
    assert line == ("10,144 of its misses (95%) in minutes 10-15 of the scored window; arrivals there 1.96x the 10 "
                    "minutes before")
    assert "arrivals" not in describe({"start_s": 0.0, "length_s": 300.0, "misses": 5, "share_of_misses": 1.0,
                                       "requests": 9, "rate_vs_before": None, "before_s": 0.0})


WORST = {"start_s": 1800.0, "length_s": 300.0, "misses": 9292, "share_of_misses": 0.92, "requests": 13700,
         "rate_vs_before": 3.23, "before_s": 600.0}


def test_report_lists_only_the_policies_below_the_percentile() -> None:
    """report.md and the terminal say where a policy below p95 lost it; a policy above it is not listed."""
    report = {**HEAD, "policies": {"planner": entry(9.0, attainment_joint=0.9055, worst_misses=WORST),
                                   "static": entry(13.0, attainment_joint=0.9939, worst_misses={**WORST, "misses": 7})}}
    assert miss_lines(report) == [f"planner: {describe(WORST)}"]
    buf = StringIO()
    render_summary(report, Console(file=buf, width=300))
    for text in (render_markdown(report), buf.getvalue()):
        assert MISSES_TITLE in text and "9,292 of its misses (92%) in minutes 30-35" in text
        assert "static: 7 of" not in text
    above = {**report, "policies": {"static": report["policies"]["static"]}}
    assert miss_lines(above) == [] and MISSES_TITLE not in render_markdown(above)


def test_bench_hours_prints_where_each_hour_below_the_sla_lost_it() -> None:
    below = _hour(234, (0.9055, 11.44), (0.9939, 13.05))
    below = type(below)(**{**below.__dict__, "worst_misses": WORST})
    s = summary([below, _hour(235, (0.97, 2.0), (0.99, 2.5))], 0.95)
    assert s["planner_below_sla_misses"] == {"234": WORST}
    lines = summary_lines(s)
    at = next(i for i, line in enumerate(lines) if "at or above the SLA" in line)
    assert lines[at + 1] == f"  hour 234: {describe(WORST)}"
