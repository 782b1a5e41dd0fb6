"""A fleet backtest's files: report.json, report.md and fleet.png, as `planner backtest --fleet`, `planner bench
fleet` and the suite's fleet scenarios write them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from planner.fleet_file import Fleet
from planner.sim.evaluate.fleet_backtest import FleetBacktest, fleet_markdown
from planner.sim.traces.records import RequestTrace


def write_fleet_report(out: Path, result: FleetBacktest, fleet: Fleet, traces: Mapping[str, RequestTrace],
                       plots: bool = True) -> tuple[str, list[Path]]:
    """report.json, report.md and, with ``plots``, fleet.png under ``out``: the markdown and the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md"]
    paths[0].write_text(json.dumps(result.report, indent=1, default=str) + "\n")
    md = fleet_markdown(result.report)
    paths[1].write_text(md)
    if plots:
        from planner.sim.evaluate.fleet_plot import plot_fleet  # matplotlib only when a plot is asked for

        paths.append(plot_fleet(out / "fleet.png", result, fleet, traces))
    return md, paths
