"""Frontier files: frontier.json (contract: per policy its points), frontier.png, and a report.md section."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.sim.evaluate.envelope import describe

# Attainment on the plot's y axis as "nines", -log10(1 - a): 90 %, 99 %, 99.9 % are equally far apart.
NINES_TICKS = (0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 0.9999)
NINES_CAP = 4.0  # 99.99 %: higher (or perfect) attainment is drawn at the top of the axis
COLOURS = {"planner": "tab:blue", "dynamo-throughput": "tab:red", "dynamo-load": "tab:orange",
           "static": "tab:gray", "reactive": "tab:green"}
SINGLE_MARKERS = ("D", "s", "^", "v", "P", "X")
X_SPAN = 3.0  # the x axis ends at this x the offline schedule's GPU-hours


def nines(a: float) -> float:
    return min(NINES_CAP, -math.log10(max(1.0 - a, 10 ** -NINES_CAP)))


def write_frontier(frontier: Mapping, out: Path, title: str = "", sla_percentile: float | None = None,
                   plot: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "frontier.json"
    path.write_text(json.dumps(frontier, indent=1) + "\n")
    return [path, plot_frontier(frontier, out / "frontier.png", title, sla_percentile)] if plot else [path]


def plot_frontier(frontier: Mapping, path: Path, title: str = "", sla_percentile: float | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 6.5))
    lo, hi = frontier["range"]
    ref = frontier["references"]
    off = ref["offline"]
    x_max = X_SPAN * off["gpu_hours"]
    ax.axhspan(nines(lo), nines(hi), color="0.94", zorder=0, label=f"compared range {lo:.0%}-{hi:.1%}")
    for name, entry in frontier["policies"].items():
        _plot_policy(ax, name, entry, x_max)
    ax.axvline(ref["lower_bound_gpu_hours"], color="k", ls="--", lw=1.2, label="lower bound (no policy can spend less)")
    ax.plot([off["gpu_hours"]], [nines(off["attainment_joint"])], marker="*", ms=16, color="gold", mec="k",
            ls="none", label="offline schedule", zorder=5)
    for (name, p), marker in zip(frontier.get("single_points", {}).items(), SINGLE_MARKERS, strict=False):
        ax.plot([min(p["gpu_hours"], x_max)], [nines(p["attainment_joint"] or 0.0)], marker=marker, ms=8,
                color="tab:purple", ls="none", label=name + _off_scale(p["gpu_hours"], x_max), zorder=5)
    if sla_percentile is not None:
        ax.axhline(nines(sla_percentile / 100.0), color="tab:purple", ls=":", lw=1, label=f"SLA p{sla_percentile:g}")
    ax.set_yticks([nines(t) for t in NINES_TICKS], [f"{t:.2%}".replace(".00%", "%") for t in NINES_TICKS])
    ax.set_ylim(0.0, NINES_CAP + 0.1)
    ax.set_xlim(0.0, x_max * 1.03)
    ax.set_xlabel(f"GPU-hours (scored window; points beyond {X_SPAN:g}x the offline schedule drawn at the edge)")
    ax.set_ylabel("joint SLA attainment (log-odds axis)")
    ax.set_title(title or "Attainment vs GPU-hours: each policy's headroom knob swept", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _off_scale(gpu_hours: float, x_max: float) -> str:
    return f" (off scale: {gpu_hours:.1f} GPU-h)" if gpu_hours > x_max else ""


def _plot_policy(ax: Any, name: str, entry: Mapping, x_max: float) -> None:
    pts = entry["points"]
    if not pts:
        return
    xs = [min(p["gpu_hours"], x_max) for p in pts]
    ys = [nines(p["attainment_joint"] or 0.0) for p in pts]
    colour = COLOURS.get(name, None)
    beyond = max(p["gpu_hours"] for p in pts)
    ax.plot(xs, ys, marker="o", ms=5, lw=1.2, color=colour, label=f"{name} ({entry['knob']})" + _off_scale(beyond, x_max))
    for p, x, y in zip(pts, xs, ys, strict=True):
        ax.annotate(f"{p['value']:g}", (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=colour,
                    weight="bold" if p.get("default") else "normal")


def frontier_markdown(frontier: Mapping) -> str:
    """The report.md section: each policy's points, the references and the pairwise comparisons."""
    ref = frontier["references"]
    off = ref["offline"]
    lines = ["", "## Frontier: attainment vs GPU-hours over each policy's headroom knob", "",
             f"Lower bound {ref['lower_bound_gpu_hours']:.2f} GPU-h; offline schedule {off['gpu_hours']:.2f} GPU-h at "
             f"{off['attainment_joint']:.2%}. Plot: frontier.png; points: frontier.json. The default value of each "
             "knob (the backtest's own run) is in bold.", "",
             "| policy | knob | value | joint attainment | GPU-h | GPU-h / offline |", "|---|---|---|---|---|---|"]
    for name, entry in frontier["policies"].items():
        for p in entry["points"]:
            value = f"**{p['value']:g}**" if p.get("default") else f"{p['value']:g}"
            lines.append(f"| {name} | {entry['knob']} | {value} | {_pct(p['attainment_joint'])} | "
                         f"{p['gpu_hours']:.2f} | {p['gpu_hours'] / off['gpu_hours']:.2f} |")
    for name, p in frontier.get("single_points", {}).items():
        lines.append(f"| {name} | - | - | {_pct(p['attainment_joint'])} | {p['gpu_hours']:.2f} | "
                     f"{p['gpu_hours'] / off['gpu_hours']:.2f} |")
    for d in frontier.get("points_dominating_offline", []):
        lines += ["", f"**BROKEN YARDSTICK: {d['policy']} at {d['knob']} {d['value']:g} ({_pct(d['attainment_joint'])} "
                  f"on {d['gpu_hours']:.2f} GPU-h) beats the offline schedule on both axes.**"]
    lines += ["", "Comparisons (lower envelopes, interpolated in log-odds of attainment):", ""]
    lines += [f"- {describe(c)}" for c in frontier.get("comparisons", [])] or ["- none (no Dynamo frontier swept)"]
    return "\n".join(lines) + "\n"


def _pct(a: float | None) -> str:
    return "-" if a is None else f"{a:.2%}"
