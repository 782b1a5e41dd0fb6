"""PlannerState: everything ``decide`` remembers between ticks. Frozen, serialisable, returned not mutated.

It holds what HPA keeps in its controller memory (recent recommendations for the stabilisation windows,
recent scale events for the rate policies) plus the calibration factors and the last targets, so a restarted
controller that reloads the state behaves exactly as if it had never stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Calibrated:
    """A bounded multiplicative correction of one latency prediction (1.0 = trust the profile)."""

    factor: float = 1.0
    at_s: float | None = None  # when the factor was last updated; it decays toward 1 from there
    samples: int = 0


@dataclass(frozen=True)
class PoolMemory:
    target: int | None = None  # the replicas last decided for this pool
    recommendations: tuple[tuple[float, int], ...] = ()  # (at_s, recommendation) for stabilisation
    events: tuple[tuple[float, int], ...] = ()  # (at_s, replica change) for the rate policies
    direction_changes: tuple[float, ...] = ()  # times the target reversed direction (oscillation audit)
    last_direction: int = 0  # +1 up, -1 down, 0 none yet
    kv_bound_at_s: float | None = None  # the last tick the pool's KV memory set its size (the flap guard reads it)
    # The ready replicas last observed and since when (calibration learns only from windows served at one size)
    ready: int | None = None
    ready_since_s: float | None = None
    # The last tick the arrival rate did not read steady (the hedge's rules, or none measured): a settled prefill
    # pool takes its step only once the steady rules have held for the settling time (the flap guard reads it)
    unsteady_at_s: float | None = None
    # (at_s, replicas' worth of KV in use: the KV usage gauge x ready replicas) over the flap guard's audit, for
    # behavior.kv_settled_s
    kv_in_use: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class PlannerState:
    at_s: float | None = None
    pools: Mapping[str, PoolMemory] = field(default_factory=dict)
    calibration: Mapping[str, Calibrated] = field(default_factory=dict)  # keys: "ttft", "itl"
    last_traffic_s: float | None = None  # the last tick that saw traffic (scale to zero's idle window)

    def pool(self, name: str) -> PoolMemory:
        return self.pools.get(name, PoolMemory())

    def with_pool(self, name: str, memory: PoolMemory) -> PlannerState:
        return replace(self, pools={**self.pools, name: memory})

    def factor(self, signal: str) -> Calibrated:
        return self.calibration.get(signal, Calibrated())

    # --------------------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "at_s": self.at_s,
            "pools": {
                name: {
                    "target": m.target,
                    "recommendations": [list(r) for r in m.recommendations],
                    "events": [list(e) for e in m.events],
                    "direction_changes": list(m.direction_changes),
                    "last_direction": m.last_direction,
                    "kv_bound_at_s": m.kv_bound_at_s,
                    "ready": m.ready,
                    "ready_since_s": m.ready_since_s,
                    "unsteady_at_s": m.unsteady_at_s,
                }
                for name, m in sorted(self.pools.items())
            },
            "calibration": {k: {"factor": c.factor, "at_s": c.at_s, "samples": c.samples}
                            for k, c in sorted(self.calibration.items())},
            "last_traffic_s": self.last_traffic_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlannerState:
        pools = {
            name: PoolMemory(
                target=None if m.get("target") is None else int(m["target"]),
                recommendations=tuple((float(t), int(r)) for t, r in m.get("recommendations", ())),
                events=tuple((float(t), int(d)) for t, d in m.get("events", ())),
                direction_changes=tuple(float(t) for t in m.get("direction_changes", ())),
                last_direction=int(m.get("last_direction", 0)),
                kv_bound_at_s=None if m.get("kv_bound_at_s") is None else float(m["kv_bound_at_s"]),
                ready=None if m.get("ready") is None else int(m["ready"]),
                ready_since_s=None if m.get("ready_since_s") is None else float(m["ready_since_s"]),
                unsteady_at_s=None if m.get("unsteady_at_s") is None else float(m["unsteady_at_s"]),
            )
            for name, m in (data.get("pools") or {}).items()
        }
        calibration = {
            k: Calibrated(float(c.get("factor", 1.0)), None if c.get("at_s") is None else float(c["at_s"]),
                          int(c.get("samples", 0)))
            for k, c in (data.get("calibration") or {}).items()
        }
        at = data.get("at_s")
        last = data.get("last_traffic_s")
        return cls(at_s=None if at is None else float(at), pools=pools, calibration=calibration,
                   last_traffic_s=None if last is None else float(last))
