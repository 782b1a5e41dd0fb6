"""Why a suite target was missed (planner/bench/target_reasons.py): each reason read from the rows beside it."""

from __future__ import annotations

import pytest

from planner.bench import scenarios
from planner.bench.target_reasons import frontier_text, postures_text
from planner.sim.evaluate.envelope import compare

POSTURES = {"lean": {"share": 0.7, "mean_gpus": 11.5}, "burning": {"share": 0.2, "mean_gpus": 13.0},
            "recovering": {"share": 0.0, "mean_gpus": None}, "unmeasured": {"share": 0.1, "mean_gpus": 14.0},
            "held": {"share": 0.0, "mean_gpus": None}}


def _entry(a: float, g: float, **more: object) -> dict:
    return {"attainment_joint": a, "gpu_hours": g, **more}


def _report(planner: dict, perfect: dict, dispersion: float = 1.0) -> dict:
    return {"references": {"offline": _entry(0.955, 10.0), "lower_bound": {"gpu_hours": 5.0}},
            "sla": {"percentile": 95.0}, "trace": {"arrival_dispersion_1s": dispersion},
            "policies": {"planner": planner, "planner+perfect-forecast": perfect, "static": _entry(0.999, 20.0)}}


def _points(knob: str, pts: list[tuple[float, float, float]]) -> list[dict]:
    return [{"knob": knob, "value": v, "attainment_joint": a, "gpu_hours": g} for v, a, g in pts]


def _frontier(mine: list[dict], theirs: list[dict], load: list[dict] | None = None) -> dict:
    load = load if load is not None else _points("sla_scale", [(1.0, 0.999, 30.0)])
    return {"policies": {"planner": {"points": mine}, "dynamo-throughput": {"points": theirs},
                         "dynamo-load": {"points": load}},
            "comparisons": [compare("planner", mine, "dynamo-throughput", theirs),
                            compare("planner", mine, "dynamo-load", load)]}


def _by_target(report: dict, frontier: dict) -> dict[str, dict]:
    return {t["target"]: t for t in scenarios.targets(report, frontier)}


ABOVE = _frontier(_points("quantile", [(0.85, 0.97, 9.0)]), _points("utilization", [(1.0, 0.97, 12.0)]))


def test_the_planners_gpu_hours_split_into_forecast_and_sizing() -> None:
    # 12 / 10 = 1.20x the offline schedule = 12 / 10.5 (not knowing the load) x 10.5 / 10 (per-interval sizing)
    got = _by_target(_report(_entry(0.99, 12.0, postures=POSTURES), _entry(0.98, 10.5)), ABOVE)
    why = got["planner"]["why"]
    assert "1.20x = 1.14x for not knowing the load" in why and "x 1.05x for sizing each interval" in why
    assert "4.00 points of attainment above p95 unspent" in why  # 99 % against 95 %
    assert "not lean on 30% of scored ticks (burning 20% at 13.0 GPUs, unmeasured 10% at 14.0 GPUs)" in why
    assert "against lean's 11.5" in why
    assert "why" not in got["perfect_forecast"] and "why" not in got["static"]  # met: nothing to explain


def test_a_run_below_the_percentile_names_its_postures_bias_and_bursts() -> None:
    perfect = _entry(0.8885, 10.3, attainment_ttft=0.8885, attainment_itl=1.0,
                     postures={**POSTURES, "lean": {"share": 0.0, "mean_gpus": None},
                               "recovering": {"share": 0.9, "mean_gpus": 15.1}, "burning": {"share": 0.0}},
                     model_bias_at_load={"ttft": {"median": 0.97, "p90": 2.17}, "itl": {"median": 1.0, "p90": 1.01}},
                     worst_misses={"start_s": 1200.0, "length_s": 300.0, "misses": 4100, "share_of_misses": 0.41,
                                   "requests": 9000, "rate_vs_before": 3.1, "before_s": 600.0})
    why = _by_target(_report(_entry(0.98, 10.9), perfect, dispersion=8.5), ABOVE)["perfect_forecast"]["why"]
    assert why.startswith("below the percentile: TTFT attained 88.85%, ITL 100.00%")
    assert "recovering 90% at 15.1 GPUs" in why and "TTFT median 0.97, p90 2.17" in why
    assert "index of dispersion at 1 s 8.50" in why
    assert ("the worst five minutes: 4,100 of its misses (41%) in minutes 20-25 of the scored window; arrivals "
            "there 3.10x the 10 minutes before") in why
    assert "over the GPU-hours" not in why  # 1.03x: within its 1.05x
    # Poisson arrivals are not offered as a reason
    calm = _by_target(_report(_entry(0.98, 10.9), perfect, dispersion=1.05), ABOVE)["perfect_forecast"]["why"]
    assert "dispersion" not in calm


def test_a_frontier_miss_names_the_points_that_undercut_it() -> None:
    mine = _points("quantile", [(0.5, 0.90, 12.0), (0.85, 0.98, 10.2), (0.99, 0.99, 11.0)])
    theirs = _points("utilization", [(0.8, 0.75, 8.7), (0.7, 0.9675, 9.9), (0.6, 0.993, 10.9)])
    frontier = _frontier(mine, theirs)
    got = _by_target(_report(_entry(0.98, 10.2), _entry(0.99, 10.0)), frontier)["frontier"]
    assert not got["met"]
    # the planner's 0.5 point costs more than its 0.85 point: its envelope is read from the 0.85 point below 98 %
    assert got["why"].startswith("at 90.00% dynamo-throughput needs")
    assert "between utilization 0.8: 75.00% on 8.70 and utilization 0.7: 96.75% on 9.90" in got["why"]
    assert "where the planner needs 10.20 (its cheapest point, quantile 0.85: 98.00% on 10.20)" in got["why"]
    # above 99 % only Dynamo was measured: each mode's point beyond the planner's best is named
    assert "dynamo-throughput reaches it, the planner's best point attains 99.00%" in got["why"]
    assert "99.02%-99.90%: dynamo-load reaches it" in got["why"]


@pytest.mark.parametrize(("posture", "text"), [
    (None, None),  # a baseline or budget control off: no posture to report
    ({"lean": {"share": 1.0, "mean_gpus": 7.7}}, "lean on every scored tick (7.7 GPUs on average)"),
])
def test_postures_text(posture: dict | None, text: str | None) -> None:
    assert postures_text({"postures": posture} if posture else {}) == text


def test_frontier_text_is_empty_when_the_planner_is_above() -> None:
    above = _frontier(_points("quantile", [(0.85, 0.97, 9.0), (0.99, 0.999, 9.5)]),
                      _points("utilization", [(1.0, 0.97, 12.0)]))
    assert frontier_text(above) == ""
    assert _by_target(_report(_entry(0.96, 10.5), _entry(0.96, 10.0)), above)["frontier"]["met"]
    above["comparisons"] = above["comparisons"][:1]
    got = _by_target(_report(_entry(0.96, 10.5), _entry(0.96, 10.0)), above)["frontier"]
    assert not got["met"] and got["why"] == "no dynamo-load frontier to compare with"
