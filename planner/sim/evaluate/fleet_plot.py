"""The fleet backtest's picture (``fleet.png``): where the budget's GPUs went over the run, against the
yardsticks, above each model's load.

Top: the GPUs each model was billed for in the shared run (stacked, the same colour per model in both
panels), the budget, the same planners without the budget (their sum) and the static pools sized at each
model's peak (their sum, held all along). Bottom: each model's arrivals per minute, so a reader sees which load
each band of GPUs followed. The warm-up (not scored) is shaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from planner.decide.spec import DeciderSpec
from planner.fleet_file import Fleet
from planner.sim.evaluate.fleet_backtest import FleetBacktest
from planner.sim.traces.records import RequestTrace

RATE_BIN_S = 60.0


def static_gpus(fleet: Fleet, report: Mapping) -> float | None:
    """The static pools' GPUs, every model's peak pool held together (None: not compared)."""
    pools = report.get("comparisons", {}).get("static_peak", {}).get("policies")
    if not pools:
        return None
    total = 0.0
    for m in fleet.members:
        spec = DeciderSpec.build(m.policy, m.profile, m.policy.stale_after_s)
        total += sum(n * spec.gpus(p) for p, n in pools[m.name]["peak_replicas"].items())
    return total


def plot_fleet(path: Path, result: FleetBacktest, fleet: Fleet, traces: Mapping[str, RequestTrace]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.shared.timeline
    t_min = np.array([r["t_s"] for r in rows]) / 60.0
    names = list(fleet.names())
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    stacks = [np.array([r.get(f"{n}.gpus", 0.0) for r in rows]) for n in names]
    top.stackplot(t_min, *stacks, labels=names, colors=[f"C{i % 10}" for i in range(len(names))], alpha=0.85,
                  step="post")
    top.axhline(fleet.max_gpus, color="k", lw=1.2, label=f"budget ({fleet.max_gpus} GPUs)")
    if result.unshared is not None:
        un = result.unshared.timeline
        top.step([r["t_s"] / 60.0 for r in un], [r["gpus"] for r in un], where="post", color="k", ls="--", lw=1,
                 label="the same planners, no shared budget")
    held = static_gpus(fleet, result.report)
    if held is not None:
        top.axhline(held, color="crimson", ls=":", lw=1.5, label=f"static pools at each model's peak ({held:g} GPUs)")
    top.set_ylabel("GPUs billed")
    top.legend(loc="upper left", fontsize=7, ncol=3)
    top.grid(True, alpha=0.3)
    end_s = max((float(t.arrival_s[-1]) for t in traces.values() if len(t)), default=0.0)
    edges = np.arange(0.0, end_s + RATE_BIN_S, RATE_BIN_S)
    for i, n in enumerate(names):
        counts, _ = np.histogram(traces[n].arrival_s, bins=edges)
        bottom.step(edges[:-1] / 60.0, counts / RATE_BIN_S, where="post", color=f"C{i % 10}", lw=1, label=n)
    bottom.set_ylabel("arrivals (req/s, per minute)")
    bottom.set_xlabel("minutes (simulated)")
    bottom.grid(True, alpha=0.3)
    warm_min = result.shared.score_from_s / 60.0
    for ax in (top, bottom):
        if warm_min > 0:
            ax.axvspan(0.0, warm_min, color="grey", alpha=0.15, lw=0)
    scored = result.report.get("fleet", {}).get("gpu_hours")
    tail = "" if scored is None else f"; {scored:.2f} GPU-h scored"
    top.set_title(f"Fleet: GPUs per model on one budget (shaded: warm-up, not scored){tail}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
