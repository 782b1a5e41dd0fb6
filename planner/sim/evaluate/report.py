"""Backtest report files: report.json (contract), report.md and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from planner.sim.evaluate.backtest import BacktestResult
from planner.sim.evaluate.decisions_log import write_decisions
from planner.sim.evaluate.miss_stretch import describe
from planner.sim.evaluate.model_bias import AT_LOAD, SIGNALS, ratios


def _fmt(v: object, spec: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec) if isinstance(v, int | float) else str(v)


# Above this index of dispersion the arrivals come in clumps: Poisson traces read 1.01-1.08 (the suite's hourly
# scenarios other than Azure code, whose 8.5 is the case this flags), a single Poisson minute up to about 1.4.
CLUMPED_DISPERSION = 2.0


def _dispersion_md(index: float | None) -> list[str]:
    if index is None:
        return []
    line = (f"Arrivals: index of dispersion {index:.2f} (variance / mean of 1-s counts within each minute, median; "
            "Poisson: 1).")
    if index > CLUMPED_DISPERSION:
        line += (" They come in clumps, where the prefill sizing's M/G/c queue assumes Poisson arrivals: its TTFT "
                 "percentiles are least reliable on such a trace.")
    return [line, ""]


def render_markdown(report: dict) -> str:
    t = report["trace"]
    sla = report["sla"]
    lines = [
        "# Backtest report", "",
        f"Trace: `{t.get('source', '')}`: {t['requests']:,} requests over {t['duration_s'] / 60:.1f} min "
        f"(mean {t['mean_rate_rps']:.1f} req/s, ISL mean {t['isl_mean']:.0f}, OSL mean {t['osl_mean']:.0f}).",
        # What was done to the file before the replay: the window cut, the rate scaled, requests the profile
        # cannot serve dropped or truncated (--oversized).
        f"Prepared: {t.get('notes') or 'as recorded'}.", "",
        *_dispersion_md(t.get("arrival_dispersion_1s")),
        *([f"Warm-up: the first {t['warmup_s'] / 60:.1f} min run every policy unscored; the table scores the "
           f"{t['scored_requests']:,} requests after it and the GPU-hours spent after it.", ""]
          if t.get("warmup_s") else []),
        f"SLA: TTFT <= {sla['ttft_ms']:g} ms and ITL <= {sla['itl_ms']:g} ms at p{sla['percentile']:g}; "
        f"met-ITL = {sla['met_itl']}.", "",
        f"Simulation: {report['sim']['mode']}, start-up {report['sim']['startup_s']:g} s, "
        f"{'kill' if report['sim']['kill'] else 'drain'} on scale-down, planner = {report['sim']['planner']}.", "",
        "| policy | attain TTFT | attain ITL | joint | violations | TTFT p50/p95/p99 ms | ITL p50/p95/p99 ms | "
        "GPU-h | GPU-h / offline | scale events | dir. changes/h | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ref = report.get("references", {})
    off = ref.get("offline")
    off_h = off["gpu_hours"] if off else None
    rows = [*report["policies"].items(), *((("offline schedule (reference)", off),) if off else ())]
    for name, p in rows:
        lines.append(_policy_row(name, p, off_h))
    lines += _section_md(POOLS_TITLE, pool_lines(report))
    lines += _postures_md(report)
    lines += _section_md(MISSES_TITLE, miss_lines(report))
    lines += _section_md(f"{BIAS_TITLE}; calibration.png", bias_lines(report))
    lines += _references_md(report)
    lines += ["", "Plots: load.png, replicas.png, latency.png, calibration.png (the sizing model's bias). "
              "Per-interval records: timeline.csv; every controller tick, its reasons and the misses after it: "
              "decisions.csv.", ""]
    return "\n".join(lines)


POOLS_TITLE = "GPU-hours by pool (scored window)"


def pool_lines(report: dict) -> list[str]:
    """One line per policy (and the offline schedule) whose replay ran more than one pool: its GPU-hours in each
    and their share."""
    off = report.get("references", {}).get("offline")
    out = []
    for name, p in [*report["policies"].items(), *((("offline schedule", off),) if off else ())]:
        split = p.get("gpu_hours_by_pool") or {}
        total = sum(split.values())
        if len(split) > 1 and total > 0:
            out.append(f"{name}: " + ", ".join(f"{pool} {h:.2f} ({h / total:.0%})" for pool, h in split.items()))
    return out


def _section_md(title: str, lines: list[str]) -> list[str]:
    """A titled list for report.md; nothing when there is nothing to list."""
    return ["", f"{title}:", *(f"- {line}" for line in lines)] if lines else []


def _postures_md(report: dict) -> list[str]:
    """One line per policy that spent an error budget: the share of scored ticks in each posture and the mean GPUs
    its decisions asked for there."""
    out = []
    for name, p in report["policies"].items():
        shares = p.get("postures")
        if shares:
            parts = [f"{k} {v['share']:.0%}" + (f" ({v['mean_gpus']:.1f} GPUs)" if v["mean_gpus"] is not None else "")
                     for k, v in shares.items() if v["share"] > 0]
            out.append(f"- {name}: " + ", ".join(parts))
    return (["", "Error-budget postures (share of scored ticks; mean GPUs asked for in them):", *out]
            if out else [])


MISSES_TITLE = "Below the SLA's percentile: each policy's five minutes with the most misses"


def miss_lines(report: dict) -> list[str]:
    """One line per policy below the SLA's percentile: where its misses came from (miss_stretch.py)."""
    if "sla" not in report:  # a report cut down to its policies (a fleet's member, a test's)
        return []
    share = report["sla"]["percentile"] / 100.0
    return [f"{name}: {describe(p['worst_misses'])}" for name, p in report["policies"].items()
            if p.get("worst_misses") and (p["attainment_joint"] or 0.0) < share - 1e-12]


BIAS_TITLE = "Sizing model bias (realised / predicted latency at the SLA percentile, median over scored samples)"


def bias_lines(report: dict) -> list[str]:
    """One line per policy with a sizing model: its bias at the forecast's load and at the load that came."""
    out = []
    for name, p in report["policies"].items():
        parts = []
        for signal in ("ttft", "itl"):
            both = [p.get(k, {}).get(signal) for k in ("model_bias", "model_bias_at_load")]
            if all(b is not None for b in both):
                parts.append(f"{signal.upper()} {both[0]['median']:.2f} at the forecast's load, "
                             f"{both[1]['median']:.2f} at the load that came")
        if parts:
            out.append(f"{name}: " + "; ".join(parts))
    return out


def _policy_row(name: str, p: dict, off_h: float | None) -> str:
    joint = p["attainment_joint"]
    violations = round(p["requests"] * (1.0 - joint)) if joint is not None else None
    ratio = p["gpu_hours"] / off_h if off_h else None
    tt, it = p["ttft_ms"], p["itl_ms"]
    return (f"| {name} | {_fmt(p['attainment_ttft'], '.2%')} | {_fmt(p['attainment_itl'], '.2%')} | "
            f"{_fmt(joint, '.2%')} | {_fmt(violations, ',')} | {_fmt(tt['p50'], '.0f')} / {_fmt(tt['p95'], '.0f')} / "
            f"{_fmt(tt['p99'], '.0f')} | {_fmt(it['p50'], '.1f')} / {_fmt(it['p95'], '.1f')} / {_fmt(it['p99'], '.1f')} | "
            f"{_fmt(p['gpu_hours'], '.2f')} | {_fmt(ratio, '.2f')} | {p['scale_events']} | "
            f"{_fmt(p['direction_changes_per_hour'], '.1f')} | {p['failed_requests']} |")


def _references_md(report: dict) -> list[str]:
    ref = report.get("references")
    if not ref:
        return []
    lb, off, checks = ref["lower_bound"], ref["offline"], report.get("checks", {})
    out = ["", f"**Lower bound** ({lb['gpu_hours']:.2f} GPU-h; no policy can meet the SLA for less): {lb['method']}",
           f"{lb['infeasible_requests']:,} requests cannot meet the SLA on any number of replicas.", "",
           f"**Offline schedule** ({off['gpu_hours']:.2f} GPU-h at {off['attainment_joint']:.2%}, seeded from "
           f"{off['seeded_from']}, {off['simulations']} full simulations): {off['method']}"]
    if not checks.get("lower_bound_le_offline", True):
        out += ["", "**BROKEN YARDSTICK: the lower bound is above the offline schedule.**"]
    if checks.get("policies_dominating_offline"):
        out += ["", "**BROKEN YARDSTICK: " + ", ".join(checks["policies_dominating_offline"]) + " spend less than "
                "the offline schedule and attain at least as much.**"]
    return out


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# Policies often hold the same replicas or latency for minutes: each gets its own dash and marker, and the
# first drawn is the widest, so a line hidden under a later one still shows around it.
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8, "borderaxespad": 0.0}


def line_style(i: int, n: int, points: int) -> dict[str, Any]:
    """Matplotlib keywords for the ``i``-th of ``n`` policies over ``points`` samples: markers ~12 per line,
    staggered between policies so that two equal lines show both."""
    every = max(n, points // 12, 1)
    return {"ls": LINE_STYLES[i % len(LINE_STYLES)], "marker": MARKERS[i % len(MARKERS)], "markersize": 4,
            "markevery": (i * every // max(n, 1), every), "lw": 1.0 + 1.5 * (n - 1 - i) / max(n - 1, 1),
            "zorder": 2 + i}


def replica_offsets(n: int, span: float) -> list[float]:
    """Small vertical offsets (about 1 % of the axis each, centred on 0) for ``n`` replica step lines: equal
    integer counts would otherwise draw one line over another."""
    unit = 0.012 * max(span, 1.0)
    return [(i - (n - 1) / 2) * unit for i in range(n)]


def plain_ms_axis(ax: Any) -> None:
    """A log axis labelled in plain milliseconds (20, 30, 1,000), never 2x10^1; minor ticks are labelled too
    when the axis spans less than a decade (else they would crowd)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def plain(v: float, _pos: object = None) -> str:
        return f"{v:,.0f}" if v >= 10 else f"{v:g}"

    ax.yaxis.set_major_formatter(FuncFormatter(plain))
    lo, hi = ax.get_ylim()
    ax.yaxis.set_minor_formatter(FuncFormatter(plain) if lo > 0 and hi / lo < 10 else NullFormatter())
    ax.set_ylabel("ms (log scale)")


def write_plots(result: BacktestResult, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    warm_min = float(result.report["trace"].get("warmup_s") or 0.0) / 60.0

    def shade(ax: Any) -> None:
        if warm_min > 0:
            ax.axvspan(0.0, warm_min, color="0.9", zorder=0, label="warm-up (not scored)")

    paths = [_save(_load_plot(plt, result, shade), out / "load.png"),
             _save(_replicas_plot(plt, result, shade), out / "replicas.png"),
             _save(_latency_plot(plt, result, shade), out / "latency.png")]
    calibration = calibration_plot(result)
    if calibration is not None:
        paths.append(_save(calibration, out / "calibration.png"))
    return paths


def _load_plot(plt: Any, result: BacktestResult, shade: Callable[[Any], None]) -> Any:
    """The offered load, requests per second in each minute."""
    tr = result.trace
    fig, ax = plt.subplots(figsize=(10, 3.5))
    bins = np.arange(0.0, tr.duration_s + 60.0, 60.0)
    counts, edges = np.histogram(tr.arrival_s, bins=bins)
    ax.step(edges[:-1] / 60, counts / 60.0, where="post", label="arrivals (req/s, per minute)")
    ax.set_xlabel("minutes")
    ax.set_ylabel("req/s")
    ax.set_title("Offered load")
    shade(ax)
    ax.legend(**LEGEND_OUTSIDE)
    return fig


def _replicas_plot(plt: Any, result: BacktestResult, shade: Callable[[Any], None]) -> Any:
    """Replicas (starting + ready) per pool, a line per policy."""
    pools = [k.split(".")[0] for k in next(iter(result.replays.values())).timeline[0] if k.endswith(".ready")]
    fig, axes = plt.subplots(len(pools), 1, figsize=(10, 3.2 * len(pools)), squeeze=False)
    count = len(result.replays)
    for ax, pool in zip(axes[:, 0], pools, strict=True):
        series = {name: (np.array([row["t_s"] for row in rep.timeline]) / 60,
                         np.array([row[f"{pool}.starting"] + row[f"{pool}.ready"] for row in rep.timeline]))
                  for name, rep in result.replays.items()}
        top = max((float(n.max()) for _, n in series.values() if len(n)), default=1.0)
        low = min((float(n.min()) for _, n in series.values() if len(n)), default=0.0)
        for i, ((name, (t, n)), dy) in enumerate(zip(series.items(), replica_offsets(count, top - low), strict=True)):
            ax.step(t, n + dy, where="post", label=name, **line_style(i, count, len(t)))
        ax.set_title(f"{pool}: replicas (starting + ready; lines offset slightly where they coincide)")
        shade(ax)
        ax.set_xlabel("minutes")
        ax.legend(**LEGEND_OUTSIDE)
    return fig


def _latency_plot(plt: Any, result: BacktestResult, shade: Callable[[Any], None]) -> Any:
    """TTFT and ITL p95 over each policy's metrics window against the SLA's targets."""
    sla = result.report["sla"]
    count = len(result.replays)
    fig, axes = plt.subplots(2, 1, figsize=(10, 7))
    for key, ax, target in (("ttft_ms_p95", axes[0], sla["ttft_ms"]), ("itl_ms_p95", axes[1], sla["itl_ms"])):
        for i, (name, rep) in enumerate(result.replays.items()):
            t = np.array([row["t_s"] for row in rep.timeline]) / 60
            v = np.array([row[key] for row in rep.timeline])
            ax.plot(t, v, label=name, **line_style(i, count, len(t)))
        ax.axhline(target, color="k", ls=(0, (6, 3)), lw=1, label="SLA target")
        shade(ax)
        ax.set_yscale("log")
        ax.set_title(f"{key.replace('_', ' ')} over each policy's metrics window (sampled every 30 s) vs SLA")
        ax.set_xlabel("minutes")
        plain_ms_axis(ax)
        ax.legend(**LEGEND_OUTSIDE)
    return fig


def calibration_plot(result: BacktestResult) -> Any:
    """calibration.png: realised / predicted latency per scored sample for every policy that predicts, one
    panel per signal, at the forecast's load (1 is a model that spends exactly the SLA it sizes for) and at
    the load that came (1 is a model that predicts what the ready replicas deliver; model_bias.py)."""
    import matplotlib.pyplot as plt

    predicting = {name: rep for name, rep in result.replays.items()
                  if any(len(ratios(rep.timeline, rep.score_from_s, s)) for s, _, _ in SIGNALS)}
    if not predicting:
        return None
    fig, axes = plt.subplots(len(SIGNALS), 1, figsize=(10, 2.0 + 1.5 * len(predicting) * len(SIGNALS)),
                             squeeze=False)
    for ax, (signal, _, _) in zip(axes[:, 0], SIGNALS, strict=True):
        shown = []
        for name, rep in predicting.items():
            for label, signals in ((f"{name} at the forecast's load", SIGNALS),
                                   (f"{name} at the load that came", AT_LOAD)):
                d = ratios(rep.timeline, rep.score_from_s, signal, signals)
                if len(d):
                    shown.append((label, d))
        if shown:
            ax.boxplot([d for _, d in shown], orientation="horizontal", showfliers=True, whis=(10, 90))
            ax.set_yticks(range(1, len(shown) + 1), [f"{n} (median {np.median(d):.2f})" for n, d in shown])
        ax.axvline(1.0, color="k", ls="--", lw=1, label="realised = predicted")
        ax.set_xscale("log")
        ax.set_xlabel(f"{signal.upper()} realised / predicted at the SLA percentile (per 30 s sample)")
        ax.set_title(f"{signal.upper()}: the sizing model's bias")
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def write_timelines(result: BacktestResult, out: Path) -> Path:
    """timeline.csv: per policy and sample time, replicas by state, GPUs, queue, running, KV usage, latency."""
    rows = [(name, row) for name, rep in result.replays.items() for row in rep.timeline]
    keys = list(rows[0][1]) if rows else ["t_s"]
    path = out / "timeline.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", *keys])
        for name, row in rows:
            w.writerow([name, *(f"{row.get(k, math.nan):.6g}" for k in keys)])
    return path


def write_report(result: BacktestResult, out: Path, plots: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md"]
    paths[0].write_text(json.dumps(result.report, indent=1) + "\n")
    paths[1].write_text(render_markdown(result.report))
    paths.append(write_timelines(result, out))
    sla = result.report["sla"]
    paths.append(write_decisions(result.replays, float(sla["ttft_ms"]), float(sla["itl_ms"]), out))
    if plots:
        paths += write_plots(result, out)
    return paths
