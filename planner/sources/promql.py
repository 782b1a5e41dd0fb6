"""PromQL for one Observation read: pure string building, one query for all pools.

Every signal of every pool becomes one sub-expression tagged with two labels (``planner_pool`` and
``planner_q``) and the sub-expressions are joined with ``or``: one HTTP round trip per read, evaluated at
one ``time=``, so all numbers describe the same instant.

Window increases are computed *without* ``increase()``'s extrapolation,

    Δc = (last_over_time(c[W]) - c offset W) >= 0  or  last_over_time(c[W])

i.e. the counter's last sample in the window minus its last sample before it. Adjacent windows then
partition the increments exactly (request counts come out as integers), a series born inside the window
counts from zero (the ``or`` branch), and a counter reset falls back to the post-reset value (the part
before the reset is lost - an undercount bounded by one restart). ``last_over_time`` ignores staleness
markers, so an engine that went away inside the window still contributes what it finished.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from planner.sources.dialects import Dialect

POOL_LABEL = "planner_pool"
Q_LABEL = "planner_q"
QUANTILES = (("p50", 0.5), ("p95", 0.95))
SLA_LABEL = "sla"  # ttft_sla, itl_sla: the quantile at the policy's SLA percentile (calibration reads it)
BOUNDS_SUFFIX = "_le"  # ttft_le, itl_le: the signals answered with one sample per bucket bound
# isl/ttft/itl_buckets: one sample per bucket bound, its value the window's cumulative count
COUNTS_SUFFIX = "_buckets"

_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^\{{(?:{_MATCHER}(?:,{_MATCHER})*,?\s*)?\}}$")


def check_selector(selector: str, what: str = "selector") -> str:
    """Return the selector normalised to ``{...}`` or ``""``; raise ValueError naming what is allowed."""
    s = selector.strip()
    if s in ("", "{}"):
        return ""
    if not _SELECTOR.match(s):
        raise ValueError(f"{what} {selector!r}: expected a label selector like "
                         '\'{pool="prefill"}\' or \'{namespace="llm",pod=~"qwen-.*"}\'')
    return s


def merge_selectors(*selectors: str) -> str:
    """AND several ``{...}`` selectors into one."""
    inner = [s.strip()[1:-1].strip().rstrip(",") for s in selectors if s and s.strip() not in ("", "{}")]
    inner = [i for i in inner if i]
    return "{" + ",".join(inner) + "}" if inner else ""


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass(frozen=True)
class ReadQuery:
    promql: str
    pools: tuple[str, ...]


def _tag(expr: str, pool: str, q: str) -> str:
    inner = f'label_replace({expr}, "{Q_LABEL}", "{q}", "", "")'
    return f'label_replace({inner}, "{POOL_LABEL}", "{pool}", "", "")'


def window_delta(metric: str, sel: str, w: str) -> str:
    last = f"last_over_time({metric}{sel}[{w}])"
    return f"(({last} - {metric}{sel} offset {w}) >= 0 or {last})"


def pool_signals(d: Dialect, sel: str, window_s: float, now_s: float, stale_after_s: float,
                 lookback_s: float, sla_quantile: float = 0.95) -> dict[str, str]:
    """Signal name -> PromQL (each evaluates to at most one sample) for one pool; ``sla_quantile``: the
    policy's SLA percentile / 100, read besides the fixed p50 and p95."""
    w = duration(window_s)
    out = {
        "newest": f"max(timestamp({d.presence_gauge}{sel}))",
        # Replicas, not engine series: one replica (pod, scrape target) may export several engines (vLLM
        # data parallelism: engine="0", "1", ...) or models; count distinct values of the replica label.
        "fresh": f"count(count by ({d.replica_label}) (timestamp({d.presence_gauge}{sel}) "
                 f">= {now_s - stale_after_s:.3f}))",
        "seen": f"count(last_over_time({d.presence_gauge}{sel}[{duration(max(lookback_s, window_s))}]))",
        "completed": f"sum({window_delta(d.completed_counter, sel, w)})",
        "running": f"sum({d.running_gauge}{sel})",
        "queue": f"sum({d.queue_gauge}{sel})",
    }
    for i, gauge in enumerate(d.in_system_gauges):
        out[f"in_now_{i}"] = f"sum({gauge}{sel})"
        out[f"in_before_{i}"] = f"sum({gauge}{sel} offset {w})"
    for name, ratio in (("isl", d.isl), ("osl", d.osl)):
        out[f"{name}_num"] = f"sum({window_delta(ratio.numerator, sel, w)})"
        out[f"{name}_den"] = f"sum({window_delta(ratio.denominator, sel, w)})"
    for name, hist in (("ttft", d.ttft_histogram), ("itl", d.itl_histogram)):
        out[f"{name}_sum"] = f"sum({window_delta(hist + '_sum', sel, w)})"
        out[f"{name}_count"] = f"sum({window_delta(hist + '_count', sel, w)})"
        buckets = f"sum by (le) ({window_delta(hist + '_bucket', sel, w)})"
        for label, q in (*QUANTILES, (SLA_LABEL, sla_quantile)):
            out[f"{name}_{label}"] = f"histogram_quantile({q:g}, {buckets})"
        # The window's cumulative count per bound: how many met the SLA target (attainment.py).
        out[f"{name}{COUNTS_SUFFIX}"] = buckets
        # The bucket layout (one sample per upper bound, tagged with its ``le``): how finely the
        # quantiles resolve an SLA target (resolution.py).
        out[f"{name}{BOUNDS_SUFFIX}"] = f"group by (le) (last_over_time({hist}_bucket{sel}[{w}]))"
    isl_hist = d.isl.histogram_name
    if isl_hist is not None:  # the prompt-length distribution of the window's requests (decide/prefill_mix.py)
        out[f"isl{COUNTS_SUFFIX}"] = f"sum by (le) ({window_delta(isl_hist + '_bucket', sel, w)})"
    if d.kv_usage_gauge is not None:
        out["kv"] = f"avg({d.kv_usage_gauge}{sel})"
    return out


def build_read_query(d: Dialect, selectors: Mapping[str, str], window_s: float, now_s: float,
                     stale_after_s: float, lookback_s: float, sla_quantile: float = 0.95) -> ReadQuery:
    parts = []
    for pool, selector in selectors.items():
        for q, expr in pool_signals(d, selector, window_s, now_s, stale_after_s, lookback_s,
                                    sla_quantile).items():
            parts.append(_tag(expr, pool, q))
    return ReadQuery(" or ".join(parts), tuple(selectors))
