"""The end of a `planner up` run: what it measured (attainment, GPU-seconds, scale events, requests) and the
Grafana dashboards pointed at its Prometheus, written to the output folder."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml

from planner.dashboards import build_dashboard, engine_dashboards
from planner.sources.attainment import attainment, met_at
from planner.sources.resolution import bracket
from planner.up.view import DecisionLog

DATASOURCE_UID = "planner-up"
TTFT_HIST = "vllm:time_to_first_token_seconds"
ITL_HIST = "vllm:inter_token_latency_seconds"


class GpuMeter:
    """GPU-seconds held by the pools' replicas (starting, ready and draining: a GPU is billed until its
    process stops), integrated over the snapshots."""

    def __init__(self, gpus_per_replica: dict[str, int]) -> None:
        self.gpus_per_replica = gpus_per_replica
        self.gpu_s = 0.0
        self.max_ready: dict[str, int] = {p: 0 for p in gpus_per_replica}
        self._last: tuple[float, int] | None = None

    def add(self, t_s: float, pools: dict[str, Any]) -> None:
        gpus = sum((p["starting"] + p["ready"] + p["draining"]) * self.gpus_per_replica.get(name, 1)
                   for name, p in pools.items())
        if self._last is not None:
            self.gpu_s += self._last[1] * max(0.0, t_s - self._last[0])
        self._last = (t_s, gpus)
        for name, p in pools.items():
            self.max_ready[name] = max(self.max_ready.get(name, 0), p["ready"])


def measured_attainment(query: Any, span_s: float, sla: dict[str, float], ttft_pool: str,  # noqa: ANN401
                        itl_pool: str) -> dict[str, Any]:
    """Requests within the TTFT target and token gaps within the ITL target over the run, from the engines'
    own histograms (what the controller and the dashboards read), bucket-interpolated as the error budget is."""
    w = f"{max(1, round(span_s))}s"
    out: dict[str, Any] = {}
    for key, hist, pool, target in (("ttft", TTFT_HIST, ttft_pool, sla["ttft_ms"]),
                                    ("itl", ITL_HIST, itl_pool, sla["itl_ms"])):
        sel = f'{{pool="{pool}"}}'
        count = query(f"sum(increase({hist}_count{sel}[{w}]))")
        buckets = query(f"sum by (le) (increase({hist}_bucket{sel}[{w}]))")
        n = float(count[0]["value"][1]) if count else None
        cumulative = [(float(b["metric"]["le"]), float(b["value"][1])) for b in buckets]
        got = attainment(n, cumulative, target)
        out[key] = None if got is None or got[0] == 0 else {
            "counted": round(got[0]), "within_sla_pct": round(100.0 * got[1] / got[0], 2), "target_ms": target,
            "pool": pool, **bucket_bounds(cumulative, target, got[0])}
    return out


def bucket_bounds(cumulative: list[tuple[float, float]], target_ms: float, counted: float) -> dict[str, Any]:
    """Where the histogram puts the target: a target on a bucket bound is measured exactly; between two it is
    interpolated, and what is certain is the share at or below the bucket's lower bound (met) and at or below
    its upper bound (at most that met). vLLM's ITL buckets are 10 and 25 ms around `planner up`'s 18 ms: with
    every gap near 17 ms the interpolation reads 53 % whatever the truth, so the summary gives the bounds."""
    res = bracket([le for le, _ in cumulative], target_ms)
    if res is None or counted <= 0:
        return {}
    if math.isclose(res.upper_ms, target_ms):  # on a bound (``le`` is inclusive): measured exactly
        return {"interpolated": False}
    low = met_at(cumulative, res.lower_ms / 1e3) if res.lower_ms > 0 else 0.0
    high = met_at(cumulative, res.upper_ms / 1e3) if math.isfinite(res.upper_ms) else counted
    if low is None or high is None:
        return {}
    return {"interpolated": True, "bucket_ms": [res.lower_ms, res.upper_ms],
            "within_lower_pct": round(100.0 * min(counted, low) / counted, 2),
            "within_upper_pct": round(100.0 * min(counted, high) / counted, 2)}


def summarize(*, duration_s: float, load: Any, decisions: DecisionLog, gpus: GpuMeter,  # noqa: ANN401
              final_pools: dict[str, Any], attained: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    counts = load.counts()
    failures = [o.problem for o in load.outcomes if not o.ok][:5]
    return {
        "duration_s": round(duration_s, 1),
        "requests": {**counts, "first_failures": failures},
        "attainment": attained,
        "gpu_seconds": round(gpus.gpu_s, 1),
        "scale_events": {p: {"up": decisions.count(p, "up"), "down": decisions.count(p, "down"),
                             "max_ready": gpus.max_ready.get(p, 0), "final_ready": final_pools[p]["ready"]}
                         for p in final_pools},
        "decisions": decisions.events,
        "notes": notes,
    }


def write_dashboards(out_dir: Path, prometheus_url: str) -> Path:
    """Grafana provisioning for this run's Prometheus: a datasource and the planner's and engines' dashboards
    with it selected. Grafana reads it with GF_PATHS_PROVISIONING=<out>/grafana/provisioning."""
    root = out_dir / "grafana"
    (root / "provisioning" / "datasources").mkdir(parents=True, exist_ok=True)
    (root / "provisioning" / "dashboards").mkdir(parents=True, exist_ok=True)
    (root / "dashboards").mkdir(parents=True, exist_ok=True)
    datasource = {"apiVersion": 1, "datasources": [{"name": "planner up", "type": "prometheus", "uid": DATASOURCE_UID,
                                                     "access": "proxy", "url": prometheus_url, "isDefault": True}]}
    (root / "provisioning" / "datasources" / "planner-up.yaml").write_text(yaml.safe_dump(datasource, sort_keys=False))
    provider = {"apiVersion": 1, "providers": [{"name": "planner up", "type": "file", "folder": "planner up",
                                                "options": {"path": str((root / "dashboards").resolve())}}]}
    (root / "provisioning" / "dashboards" / "planner-up.yaml").write_text(yaml.safe_dump(provider, sort_keys=False))
    boards = {"planner.json": build_dashboard(), **engine_dashboards()}
    for name, board in boards.items():
        if name.startswith("engines-") and name != "engines-vllm.json":
            continue  # the engines here speak vLLM's metrics
        (root / "dashboards" / name).write_text(json.dumps(pointed_at(board), indent=2) + "\n")
    return root


def pointed_at(board: dict[str, Any], uid: str = DATASOURCE_UID) -> dict[str, Any]:
    """The dashboard with its datasource variable set to ``uid`` and its time range on the last 15 minutes."""
    out = copy.deepcopy(board)
    for var in out.get("templating", {}).get("list", []):
        if var.get("type") == "datasource":
            var["current"] = {"selected": True, "text": "planner up", "value": uid}
    out["time"] = {"from": "now-15m", "to": "now"}
    out["refresh"] = "5s"
    return out
