"""What `planner init` prints: what it chose and why (a table per pool), or the closest configuration."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.requests.checks import Resolved
from planner.requests.status import Result


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}" if x >= 10 else f"{x:,.2f}"


def render_result(resolved: Resolved, result: Result, console: Console) -> None:
    spec = resolved.spec
    load = result.load
    console.print(f"[bold]{resolved.model.name}[/] ({resolved.served_name}) on [bold]{resolved.hardware.name}[/], "
                  f"{spec.engine}, backend {result.backend}: {load.rate_rps:.4g} req/s, ISL {load.isl}, "
                  f"OSL {load.osl} ({load.source}); SLA TTFT {spec.sla.ttft_ms:g} ms, ITL {spec.sla.itl_ms:g} ms "
                  f"at p{spec.sla.percentile:g}")
    table = Table(title=f"{result.mode.value} serving, {result.gpus} GPUs", title_justify="left")
    for col in ("pool", "TP", "GPUs/replica", "replicas", "GPUs", "predicted", "target"):
        table.add_column(col, justify="left" if col == "pool" else "right")
    for pool, s in result.pools.items():
        metric = "TTFT" if pool == "prefill" else "ITL"
        table.add_row(pool, str(s.tp), str(s.gpus_per_replica), str(s.replicas), str(s.gpus),
                      f"{metric} {_ms(s.latency_ms)} ms", f"{s.target_ms:g} ms")
    console.print(table)
    for pool, s in result.pools.items():
        console.print(f"why TP {s.tp} for {pool}: {s.reason}")
    a = result.advice
    console.print(f"why {result.mode.value}: KV {a.kv_bytes / 1e9:.2f} GB per request, {a.transfer_ms:.1f} ms over "
                  f"{a.link_gbps:g} Gb/s; {a.reason}")
    budget = spec.hardware.total_gpus
    console.print(f"predicted at p{spec.sla.percentile:g}: TTFT {_ms(result.predicted_ttft_ms)} ms, ITL "
                  f"{_ms(result.predicted_itl_ms)} ms; {result.gpus} GPUs"
                  + (f" of the {budget} budgeted" if budget else " (no GPU budget given)"))


def render_closest(closest: dict | None, console: Console) -> None:
    if not closest:
        return
    table = Table(title="closest configuration", title_justify="left")
    for col in ("what", "value"):
        table.add_column(col)
    for key, value in closest.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items() if k != "reason")
        table.add_row(str(key), str(value))
    console.print(table)
