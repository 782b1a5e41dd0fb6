"""A rich table comparing policies in a backtest report (terminal view of report.json)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.sim.evaluate.report import (
    BIAS_TITLE,
    MISSES_TITLE,
    POOLS_TITLE,
    bias_lines,
    miss_lines,
    pool_lines,
)


def render_summary(report: dict, console: Console) -> None:
    ref = report.get("references", {})
    off = ref.get("offline")
    off_h = off["gpu_hours"] if off else None
    table = Table(title="SLA attainment vs GPU-hours", show_lines=False)
    for col in ("policy", "joint", "TTFT ok", "ITL ok", "TTFT p95 ms", "ITL p95 ms", "GPU-h", "x offline",
                "scale events", "dir. changes/h", "failed"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=col == "policy")
    rows = [*report["policies"].items(), *((("[dim]offline schedule[/]", off),) if off else ())]
    for name, p in rows:
        ratio = f"{p['gpu_hours'] / off_h:.2f}" if off_h else "-"
        joint = p["attainment_joint"]
        colour = "green" if joint >= 0.99 else "yellow" if joint >= 0.95 else "red"
        table.add_row(name, f"[{colour}]{joint:.2%}[/]", f"{p['attainment_ttft']:.2%}", f"{p['attainment_itl']:.2%}",
                      f"{p['ttft_ms']['p95']:,.0f}", f"{p['itl_ms']['p95']:.1f}", f"{p['gpu_hours']:.2f}", ratio,
                      str(p["scale_events"]), f"{p['direction_changes_per_hour']:.1f}", str(p["failed_requests"]))
    if "lower_bound" in ref:
        lb = ref["lower_bound"]
        table.add_row("[dim]lower bound[/]", "", "", "", "", "", f"{lb['gpu_hours']:.2f}",
                      f"{lb['gpu_hours'] / off_h:.2f}" if off_h else "-", "", "", "")
    console.print(table)
    for title, lines in ((POOLS_TITLE, pool_lines(report)), (MISSES_TITLE, miss_lines(report)),
                         (BIAS_TITLE, bias_lines(report))):
        if lines:
            console.print(f"{title}:\n" + "\n".join(f"  {line}" for line in lines), markup=False)
    checks = report.get("checks", {})
    if not checks.get("lower_bound_le_offline", True):
        console.print("[bold red]BROKEN YARDSTICK: the lower bound is above the offline schedule[/]")
    if checks.get("policies_dominating_offline"):
        console.print("[bold red]BROKEN YARDSTICK: " + ", ".join(checks["policies_dominating_offline"])
                      + " spend less than the offline schedule and attain at least as much[/]")
