"""What `planner up` shows while it runs: one snapshot a second (load, replicas per pool, the latencies the
controller read against the SLA, the decisions that changed a pool), as a rich table or as a JSON line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.service.loop import TickResult
from planner.types import Observation

SHOWN_DECISIONS = 6


@dataclass
class DecisionLog:
    """The decisions that changed a pool's target, with their reasons, in order (fed the recorded ticks)."""

    started_s: float
    events: list[dict[str, Any]] = field(default_factory=list)
    seen: int = 0
    last: dict[str, int] = field(default_factory=dict)

    def update(self, ticks: list[TickResult]) -> None:
        for tick in ticks[self.seen:]:
            if tick.decision is None:
                continue
            for pool, pd in tick.decision.pools.items():
                before = self.last.get(pool)
                if before is not None and pd.replicas != before:
                    self.events.append({"t_s": round(tick.at_s - self.started_s, 1), "pool": pool, "from": before,
                                        "to": pd.replicas, "reasons": [r.value for r in pd.reasons]})
                self.last[pool] = pd.replicas
        self.seen = len(ticks)

    def count(self, pool: str, direction: str) -> int:
        return sum(1 for e in self.events if e["pool"] == pool and (e["to"] > e["from"]) == (direction == "up"))


def snapshot(now_s: float, started_s: float, load: Any, actuator_view: dict[str, dict[str, list[int]]],  # noqa: ANN401
             last: TickResult | None, decisions: DecisionLog, sla: dict[str, float],
             ttft_pool: str, itl_pool: str) -> dict[str, Any]:
    """One line of `planner up --json` (and what the table shows)."""
    obs = last.observation if last is not None and isinstance(last.observation, Observation) else None
    targets = last.decision.targets() if last is not None and last.decision is not None else {}
    pools: dict[str, Any] = {}
    for pool, states in actuator_view.items():
        po = obs.pools.get(pool) if obs is not None else None
        pools[pool] = {"desired": targets.get(pool), "starting": len(states["starting"]),
                       "ready": len(states["ready"]), "draining": len(states["draining"]),
                       "rate_rps": _round(po.rate_rps if po else None)}
    ttft = obs.pools.get(ttft_pool) if obs is not None else None
    itl = obs.pools.get(itl_pool) if obs is not None else None
    return {
        "t_s": round(now_s - started_s, 1),
        "load": {"rate_rps": round(load.rate_rps(), 2), **load.counts()},
        "pools": pools,
        "latency": {"ttft_ms_p95": _round(ttft.ttft_ms_p95 if ttft else None), "ttft_ms_sla": sla["ttft_ms"],
                    "itl_ms_p95": _round(itl.itl_ms_p95 if itl else None), "itl_ms_sla": sla["itl_ms"]},
        "controller": "no data yet" if obs is None else "reading Prometheus",
        "decisions": decisions.events[-SHOWN_DECISIONS:],
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 1)


def render(snap: dict[str, Any], header: str) -> Group:
    load = snap["load"]
    head = Text.assemble((header, "bold"), f"   t={snap['t_s']:.0f}s   load {load['rate_rps']:.2f} req/s "
                         f"(sent {load['sent']}, in flight {load['in_flight']}, ok {load['ok']}, "
                         f"failed {load['failed']})   controller: {snap['controller']}")
    pools = Table(title="replicas", title_justify="left")
    for col in ("pool", "desired", "starting", "ready", "draining", "req/s"):
        pools.add_column(col, justify="left" if col == "pool" else "right")
    for name, p in snap["pools"].items():
        pools.add_row(name, _s(p["desired"]), str(p["starting"]), str(p["ready"]), str(p["draining"]),
                      _s(p["rate_rps"]))
    lat = snap["latency"]
    latency = Text.assemble("p95 TTFT ", _judged(lat["ttft_ms_p95"], lat["ttft_ms_sla"]),
                            f" ms (SLA {lat['ttft_ms_sla']:g})   p95 ITL ",
                            _judged(lat["itl_ms_p95"], lat["itl_ms_sla"]), f" ms (SLA {lat['itl_ms_sla']:g})")
    decided = Table(title="decisions that changed a pool", title_justify="left")
    for col in ("t", "pool", "replicas", "reasons"):
        decided.add_column(col)
    for e in snap["decisions"]:
        decided.add_row(f"{e['t_s']:.0f}s", e["pool"], f"{e['from']} -> {e['to']}", ", ".join(e["reasons"]))
    return Group(head, pools, latency, decided)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _judged(value: float | None, target: float) -> Text:
    if value is None:
        return Text("-")
    return Text(f"{value:g}", style="green" if value <= target else "bold red")

