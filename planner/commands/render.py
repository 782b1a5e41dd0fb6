"""Rich renderings shared by several commands (`planner plan` and `planner demo` show the same plan table)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from planner.config import Policy
from planner.types import Decision


def _ms(x: float | None, sets_it: bool = False) -> str:
    """A predicted latency: "-" where the pool does not set it, "unbounded" where the model has no finite
    answer (over capacity: the queue grows without bound)."""
    if x is None:
        return "unbounded" if sets_it else "-"
    return f"{x:,.1f}"


def _with_ms(x: float | None, sets_it: bool) -> str:
    return "unbounded (queue grows)" if x is None and sets_it else f"{_ms(x)} ms"


def render_plan(decision: Decision, policy: Policy, console: Console) -> None:
    mode = policy.mode
    table = Table(title=f"plan for {policy.name} ({policy.mode})")
    for col in ("pool", "replicas", "GPUs/replica", "GPUs", "SLA asks", "pred. TTFT ms", "pred. ITL ms", "reasons"):
        table.add_column(col)
    for name, p in decision.pools.items():
        table.add_row(name, str(p.replicas), str(p.gpus_per_replica), str(p.gpus), f"{p.desired_unclamped:.2f}",
                      _ms(p.predicted_ttft_ms, name == mode.ttft_pool), _ms(p.predicted_itl_ms, name == mode.itl_pool),
                      ", ".join(r.value for r in p.reasons))
    console.print(table)
    d = decision.detail
    sized = bool(decision.pools)
    console.print(f"total {decision.gpus} GPUs; predicted TTFT p{policy.sla.percentile:g} "
                  f"{_with_ms(decision.predicted_ttft_ms, sized)} (target {policy.sla.ttft_ms:g}), ITL "
                  f"{_with_ms(decision.predicted_itl_ms, sized)} (target {policy.sla.itl_ms:g}); load "
                  f"{d.get('rate_rps', 0):g} req/s, ISL {d.get('isl_tokens', 0):g}, OSL {d.get('osl_tokens', 0):g}")
