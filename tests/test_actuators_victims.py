"""Which replicas a scale-down removes (planner/actuators/victims.py): least loaded, newest among equals,
unknown load last; the load is the larger of the router's count and the engine's gauges."""

from __future__ import annotations

import pytest

from planner.actuators.victims import Candidate, least_loaded

C = Candidate


@pytest.mark.parametrize(("candidates", "count", "expected"), [
    # the idle one goes even though it is the oldest
    ([C("old", 1, 0, 0), C("new", 2, 3, 3)], 1, ["old"]),
    # equal loads: the newest goes
    ([C("a", 1, 1, 1), C("b", 3, 1, 1), C("c", 2, 1, 1)], 1, ["b"]),
    # the larger of the two counts is the load: the router sees 0 on "x" but its engine holds 4 (other clients)
    ([C("x", 5, 0, 4), C("y", 1, 2, 1)], 1, ["y"]),
    # only one count known is enough
    ([C("x", 5, None, 2), C("y", 1, 1, None)], 1, ["y"]),
    # unknown load goes after every known one, even a busy one
    ([C("u", 9, None, None), C("busy", 1, 7, 7)], 1, ["busy"]),
    # several: in removal order
    ([C("a", 1, 2, 2), C("b", 2, 0, 0), C("c", 3, 1, 0), C("d", 4, 0, None)], 3, ["d", "b", "c"]),
    # unknowns among themselves: newest first
    ([C("a", 1, None, None), C("b", 2, None, None)], 1, ["b"]),
    # a non-finite gauge is not a load
    ([C("nan", 2, None, float("nan")), C("one", 1, 1, 1)], 1, ["one"]),
    ([C("a", 1, 0, 0)], 0, []),
])
def test_least_loaded_goes_first_ties_to_the_newest_unknown_last(candidates, count, expected) -> None:
    assert least_loaded(candidates, count) == expected
