"""`planner observe`: its flags -> what a PrometheusSource needs, and an Observation -> the contract's JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.commands.args import seconds
from planner.errors import UserError
from planner.sources.dialects import dialect_names
from planner.sources.promql import check_selector, merge_selectors
from planner.types import NoData, Observation, Pool, PoolObservation

POOL_FIELDS = ("requests", "rate_rps", "isl_mean", "osl_mean", "ttft_ms_p50", "ttft_ms_p95", "itl_ms_p50",
               "itl_ms_p95", "queue", "running", "kv_usage", "ttft_ms_mean", "itl_ms_mean", "ready_replicas",
               "ttft_p95_bracket_ms", "ttft_p95_resolution", "ttft_p95_resolved", "itl_p95_bracket_ms",
               "itl_p95_resolution", "itl_p95_resolved")


@dataclass(frozen=True)
class ObserveArgs:
    url: str
    dialect: str
    selectors: dict[str, str]
    window_s: float
    timeout_s: float
    stale_after_s: float
    targets_ms: dict[str, float]  # SLA targets whose histogram resolution the read reports ({} = none)
    auth: Any = None  # sources.auth.PromAuth from the policy's metrics section (None: no credentials)


def resolve(prometheus: str | None, dialect: str | None, selector: str | None, policy: Path | None,
            window_s: float, timeout_s: float, stale_after_s: float | None, ttft_ms: float | None = None,
            itl_ms: float | None = None) -> ObserveArgs:
    for flag, target in (("--ttft-ms", ttft_ms), ("--itl-ms", itl_ms)):
        if target is not None and (not math.isfinite(target) or target <= 0):
            raise UserError(f"{flag}: {target:g} must be a finite number of milliseconds > 0")
    targets = {k: v for k, v in (("ttft", ttft_ms), ("itl", itl_ms)) if v is not None}
    seconds("--window-s", window_s)  # at most 30 days: a longer range is no observation of the present
    if not math.isfinite(timeout_s) or not 0 < timeout_s <= 120:
        raise UserError(f"--timeout-s: {timeout_s:g} must be in (0, 120]")
    seconds("--stale-after-s", stale_after_s)
    try:
        extra = check_selector(selector or "", "--selector")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if policy is not None:
        from planner.policy_file import load_policy
        from planner.sources.auth import PromAuth
        from planner.sources.settings import pool_selectors

        pol = load_policy(policy)
        selectors: dict[str, str] = {}
        for pool, given in pool_selectors(pol, pol.metrics).items():
            try:
                own = check_selector(given, f"{policy}: metrics.selectors.{pool}")
            except ValueError as exc:
                raise UserError(str(exc)) from None
            selectors[pool] = merge_selectors(own, extra)  # --selector narrows every pool (e.g. namespace)
        url = prometheus or pol.metrics.url
        dialect = dialect or pol.metrics.dialect
        stale = stale_after_s or pol.stale_after_s
        targets = {"ttft": pol.sla.ttft_ms, "itl": pol.sla.itl_ms, **targets}  # the flags override the SLA
        auth = PromAuth.from_metrics(pol.metrics)
    else:
        if prometheus is None:
            raise UserError("--prometheus URL is required (or --policy FILE with metrics.url)")
        url, selectors, auth = prometheus, {Pool.AGGREGATED: extra}, None
        dialect = dialect or "vllm"
        stale = stale_after_s or 60.0
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--prometheus {url!r}: expected an http:// or https:// URL")
    if dialect not in dialect_names():
        raise UserError(f"--dialect {dialect!r}: allowed {', '.join(dialect_names())}")
    return ObserveArgs(url, dialect, selectors, window_s, timeout_s, stale, targets, auth)


def _num(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_num(x) for x in v]
    if isinstance(v, float) and math.isinf(v):
        return "inf"  # JSON has no infinity; a bracket or ratio past the last bucket says so in words
    return round(v, 6) if isinstance(v, float) else v


def pool_json(p: PoolObservation) -> dict[str, Any]:
    return {f: _num(getattr(p, f)) for f in POOL_FIELDS}


def observation_json(result: Observation | NoData, window_s: float) -> dict[str, Any]:
    if isinstance(result, NoData):
        return {"status": "no_data", "reason": result.reason.value, "window_s": window_s, "pools": {}}
    return {"status": "ok", "reason": None, "window_s": window_s,
            "pools": {name: pool_json(p) for name, p in result.pools.items()}}
