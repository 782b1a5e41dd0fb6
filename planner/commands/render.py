"""Rich renderings shared by several commands (`planner plan` and `planner demo` show the same plan table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from planner.config import Policy
from planner.types import Decision

if TYPE_CHECKING:
    from planner.fleet import FleetTick
    from planner.fleet_file import Fleet


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


def render_fleet(tick: FleetTick, fleet: Fleet, console: Console) -> None:
    """One row per policy (in the order the fleet applies them): what it asked, what it got, and why."""
    table = Table(title=f"fleet plan: {len(fleet.members)} policies on {fleet.max_gpus} GPUs")
    for col in ("policy", "priority", "wanted", "granted", "GPUs wanted", "GPUs granted", "pred. TTFT ms",
                "pred. ITL ms", "fleet reason"):
        table.add_column(col)
    for name in tick.fit.order:
        m, d = fleet.member(name), tick.granted[name]
        why = tick.fit.reason(name)
        table.add_row(name, str(m.priority), _sizes(tick.wanted[name]), _sizes(d), str(tick.fit.wanted_gpus[name]),
                      str(tick.fit.granted_gpus[name]), _ms(d.predicted_ttft_ms, bool(d.pools)),
                      _ms(d.predicted_itl_ms, bool(d.pools)), why.value if why is not None else "-")
    console.print(table)
    prices = {n: fleet.cost_per_gpu_hour(n) for n in tick.fit.order}
    known = {n: c for n, c in prices.items() if c is not None}
    per_hour = (f"; {sum(c * tick.fit.granted_gpus[n] for n, c in known.items()):,.2f} per hour"
                if known and len(known) == len(prices) else "")
    console.print(f"fleet: {tick.fit.used_gpus} of {fleet.max_gpus} GPUs granted ({sum(tick.fit.wanted_gpus.values())} "
                  f"wanted){per_hour}")
    for name in tick.fit.order:
        why = tick.fit.reason(name)
        if why is not None:
            console.print(f"  {name}: {tick.fit.granted_gpus[name]} of {tick.fit.wanted_gpus[name]} GPUs ({why.value})")


def _sizes(decision: Decision) -> str:
    return " ".join(f"{p}={n}" for p, n in decision.targets().items())
