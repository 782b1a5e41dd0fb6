"""Where the GPU-hours went: a backtest report's split by pool (report.json, report.md, the terminal's summary)."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

from planner.sim.evaluate.report import POOLS_TITLE, pool_lines, render_markdown
from planner.sim.evaluate.summary_table import render_summary

HEAD = {"trace": {"requests": 100, "duration_s": 600.0, "mean_rate_rps": 1.0, "isl_mean": 1000.0, "osl_mean": 200.0},
        "sla": {"ttft_ms": 1000.0, "itl_ms": 40.0, "percentile": 95.0, "met_itl": "mean ITL"},
        "sim": {"mode": "disaggregated", "startup_s": 120.0, "kill": False, "planner": "test"}}


def entry(gpu_hours: float, **extra: object) -> dict:
    return {"requests": 100, "attainment_ttft": 0.97, "attainment_itl": 1.0, "attainment_joint": 0.97,
            "ttft_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0}, "itl_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0},
            "gpu_hours": gpu_hours, "scale_events": 0, "direction_changes_per_hour": 0.0, "failed_requests": 0,
            **extra}


@pytest.mark.parametrize("policies, offline, want", [
    pytest.param({"planner": entry(9.76, gpu_hours_by_pool={"prefill": 6.5, "decode": 3.26})}, None,
                 ["planner: prefill 6.50 (67%), decode 3.26 (33%)"], id="disaggregated"),
    pytest.param({"planner": entry(4.0, gpu_hours_by_pool={"prefill": 3.0, "decode": 1.0}),
                  "static": entry(6.0, gpu_hours_by_pool={"prefill": 3.0, "decode": 3.0})},
                 entry(3.5, gpu_hours_by_pool={"prefill": 2.5, "decode": 1.0}),
                 ["planner: prefill 3.00 (75%), decode 1.00 (25%)", "static: prefill 3.00 (50%), decode 3.00 (50%)",
                  "offline schedule: prefill 2.50 (71%), decode 1.00 (29%)"], id="every-policy-and-the-offline"),
    # One pool (an aggregated policy) has nothing to split; a report from before the field says nothing.
    pytest.param({"planner": entry(2.0, gpu_hours_by_pool={"aggregated": 2.0})}, None, [], id="one-pool"),
    pytest.param({"planner": entry(2.0)}, None, [], id="older-report"),
    pytest.param({"planner": entry(0.0, gpu_hours_by_pool={"prefill": 0.0, "decode": 0.0})}, None, [],
                 id="nothing-spent"),
])
def test_pool_lines(policies: dict, offline: dict | None, want: list[str]) -> None:
    report: dict = {"policies": policies}
    if offline is not None:
        report["references"] = {"offline": {**offline, "seeded_from": "planner", "simulations": 1, "method": "m"},
                                "lower_bound": {"gpu_hours": 1.0, "method": "m", "infeasible_requests": 0}}
    assert pool_lines(report) == want
    md = render_markdown({**report, **HEAD})
    buf = StringIO()
    render_summary(report, Console(file=buf, width=300))
    for text in (md, buf.getvalue()):
        assert (POOLS_TITLE in text) == bool(want)
        assert all(line in text for line in want)
