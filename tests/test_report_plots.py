"""The backtest's plots (`planner demo`, `planner backtest`) as a reader meets them (issue 29): lines that coincide
stay visible, legends sit outside the data, latency axes read in plain milliseconds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.evaluate import report
from planner.sim.evaluate.backtest import run_backtest
from planner.sim.traces.synthetic import sinusoid

matplotlib.use("Agg")
REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles/h200/qwen3-32b.json"


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each PNG's figure, drawn, captured as write_plots saves it."""
    result = run_backtest(sinusoid(25.0, 15.0, 400.0, 300.0, isl=1000, osl=150, seed=5), load_profile(PROFILE),
                          load_policy(REPO / "policies/example.yaml"), baselines=["static", "reactive"],
                          offline_simulations=2)
    captured: dict[str, Any] = {}
    save = report._save

    def keep(fig: Any, path: Path) -> Path:
        fig.tight_layout()  # as _save lays it out, then drawn: tick labels and extents are final
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        captured[path.name] = [{"ax": ax, "labels": [t.get_text() for t in ax.get_yticklabels(which="both")],
                                "legend_x0": None if ax.get_legend() is None else
                                ax.get_legend().get_window_extent(renderer).x0,
                                "axes_x1": ax.get_window_extent(renderer).x1} for ax in fig.axes]
        return save(fig, path)

    mp = pytest.MonkeyPatch()
    mp.setattr(report, "_save", keep)
    try:
        report.write_plots(result, tmp_path_factory.mktemp("plots"))
    finally:
        mp.undo()
    return captured


def test_legends_lie_outside_the_data(figures: dict[str, Any]) -> None:
    for name in ("load.png", "replicas.png", "latency.png"):
        for panel in figures[name]:
            assert panel["legend_x0"] is not None and panel["legend_x0"] >= panel["axes_x1"], name


def test_latency_axes_read_in_plain_milliseconds(figures: dict[str, Any]) -> None:
    for panel in figures["latency.png"]:
        shown = [t for t in panel["labels"] if t]
        assert shown and all(re.fullmatch(r"[\d,]+(\.\d+)?", t) for t in shown), shown  # no 2x10^1, no $...$
        assert panel["ax"].get_ylabel() == "ms (log scale)"


def test_policies_that_coincide_stay_apart(figures: dict[str, Any]) -> None:
    for panel in figures["replicas.png"]:
        ax = panel["ax"]
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        assert len(lines) >= 4  # planner, perfect forecast, the two baselines, offline
        looks = {(ln.get_linestyle(), ln.get_marker(), str(ln.get_markevery())) for ln in lines}
        assert len(looks) == len(lines)
        levels = {round(float(ln.get_ydata()[0]) % 1.0, 6) for ln in lines}  # same count, different offset
        assert len(levels) == len(lines)


@pytest.mark.parametrize("n", [2, 6, 8])
def test_every_policy_gets_its_own_markers(n: int) -> None:
    styles = [report.line_style(i, n, 16) for i in range(n)]
    assert len({s["markevery"] for s in styles}) == n and len({(s["ls"], s["marker"]) for s in styles}) == n
    assert styles[0]["lw"] > styles[-1]["lw"]  # the first drawn is widest: visible under the rest
