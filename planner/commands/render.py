"""Rich renderings shared by several commands (`planner plan` and `planner demo` show the same plan table)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.config import Policy
from planner.types import Decision


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def render_plan(decision: Decision, policy: Policy, console: Console) -> None:
    table = Table(title=f"plan for {policy.name} ({policy.mode})")
    for col in ("pool", "replicas", "GPUs/replica", "GPUs", "SLA asks", "pred. TTFT ms", "pred. ITL ms", "reasons"):
        table.add_column(col)
    for name, p in decision.pools.items():
        table.add_row(name, str(p.replicas), str(p.gpus_per_replica), str(p.gpus), f"{p.desired_unclamped:.2f}",
                      _ms(p.predicted_ttft_ms), _ms(p.predicted_itl_ms), ", ".join(r.value for r in p.reasons))
    console.print(table)
    d = decision.detail
    console.print(f"total {decision.gpus} GPUs; predicted TTFT p{policy.sla.percentile:g} "
                  f"{_ms(decision.predicted_ttft_ms)} ms (target {policy.sla.ttft_ms:g}), ITL "
                  f"{_ms(decision.predicted_itl_ms)} ms (target {policy.sla.itl_ms:g}); load {d.get('rate_rps', 0):g} "
                  f"req/s, ISL {d.get('isl_tokens', 0):g}, OSL {d.get('osl_tokens', 0):g}")
