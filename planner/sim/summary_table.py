"""A rich table comparing policies in a backtest report (terminal view of report.json)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def render_summary(report: dict, console: Console) -> None:
    pols = report["policies"]
    oracle_gpu_h = pols.get("oracle", {}).get("gpu_hours")
    table = Table(title="SLA attainment vs GPU-hours", show_lines=False)
    for col in ("policy", "joint", "TTFT ok", "ITL ok", "TTFT p95 ms", "ITL p95 ms", "GPU-h", "x oracle",
                "scale events", "dir. changes/h", "failed"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=col == "policy")
    for name, p in pols.items():
        ratio = f"{p['gpu_hours'] / oracle_gpu_h:.2f}" if oracle_gpu_h else "-"
        joint = p["attainment_joint"]
        colour = "green" if joint >= 0.99 else "yellow" if joint >= 0.95 else "red"
        table.add_row(name, f"[{colour}]{joint:.2%}[/]", f"{p['attainment_ttft']:.2%}", f"{p['attainment_itl']:.2%}",
                      f"{p['ttft_ms']['p95']:,.0f}", f"{p['itl_ms']['p95']:.1f}", f"{p['gpu_hours']:.2f}", ratio,
                      str(p["scale_events"]), f"{p['direction_changes_per_hour']:.1f}", str(p["failed_requests"]))
    console.print(table)
