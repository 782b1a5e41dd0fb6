"""Recent decisions, with their reasons, inputs and forecasts: a bounded ring buffer behind GET /v1/decisions.

One record per tick that decided (leader or standby), written by the control loop's thread and read by the
HTTP server's: a lock guards the deque. Bounded (``maxlen``), so a controller that runs for months holds the
last N ticks and no more.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import Any

from planner.types import Applied, Decision, LoadForecast, NoData, Observation

DEFAULT_KEEP = 2880  # a day of 30 s ticks


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def observation_json(observation: Observation | NoData) -> dict[str, Any]:
    if isinstance(observation, NoData):
        return {"no_data": observation.reason.value, "detail": observation.detail}
    return {"pools": {p: {"rate_rps": _num(o.rate_rps), "isl_mean": _num(o.isl_mean), "osl_mean": _num(o.osl_mean),
                          "ttft_ms_p95": _num(o.ttft_ms_p95), "itl_ms_p95": _num(o.itl_ms_p95),
                          "running": _num(o.running), "queue": _num(o.queue), "kv_usage": _num(o.kv_usage),
                          "ready_replicas": o.ready_replicas}
                      for p, o in observation.pools.items()},
            **({"waiting_at_router": observation.waiting} if observation.waiting else {})}


def forecast_json(forecast: LoadForecast | None) -> dict[str, Any] | None:
    if forecast is None:
        return None
    out: dict[str, Any] = {}
    series = {"rate_rps": forecast.rate_rps, "isl_tokens": forecast.isl_tokens, "osl_tokens": forecast.osl_tokens,
              "prefill_tokens_per_s": forecast.prefill_tokens_per_s, "decode_tokens_per_s": forecast.decode_tokens_per_s}
    for name, f in series.items():
        if f is not None:
            out[name] = {"mean": _num(f.mean), "ok": f.ok, "model": f.model, "horizon_s": f.horizon_s,
                         "quantiles": {f"{q:g}": _num(v) for q, v in f.quantiles.items()}}
    return out


def finite(value: Any) -> Any:
    """JSON-safe: NaN and infinities (no JSON for them) become None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def decision_json(decision: Decision) -> dict[str, Any]:
    """decide/serialize.py's one shape for a Decision, JSON-safe."""
    from planner.decide.serialize import decision_dict

    return finite(decision_dict(decision))


def tick_record(policy: str, at_s: float, leader: bool, observation: Observation | NoData,
                decision: Decision | None, forecast: LoadForecast | None, applied: Applied | None,
                error: str | None) -> dict[str, Any]:
    return {"policy": policy, "at_s": at_s, "leader": leader, "error": error,
            "decision": None if decision is None else decision_json(decision),
            "observation": observation_json(observation), "forecast": forecast_json(forecast),
            "applied": None if applied is None else {"before": dict(applied.before), "after": dict(applied.after),
                                                     "changed": applied.changed}}


class DecisionLog:
    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._records: deque[dict[str, Any]] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._records.append(record)

    def since(self, since_s: float | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Records at or after ``since_s``, oldest first; ``limit``: the newest ``limit`` of them."""
        with self._lock:
            out = [r for r in self._records if since_s is None or r["at_s"] >= since_s]
        return out[-limit:] if limit else out

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
