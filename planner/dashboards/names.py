"""Series names and selectors taken from the metric objects themselves (planner/telemetry.py, the dialects).

Nothing here spells a metric name: ``series(PLANNER.desired_replicas)`` is whatever telemetry.py declared,
with the suffix Prometheus scrapes (``_total`` for counters, ``_bucket``/``_sum``/``_count`` for
histograms). ``sel`` adds the dashboard's ``$policy`` and ``$pool`` matchers to every metric that has
those labels, and refuses a label the metric does not have, so a renamed label fails at generation.
"""

from __future__ import annotations

from typing import Any

from planner.telemetry import PlannerMetrics, RouterMetrics

PLANNER = PlannerMetrics()
ROUTER = RouterMetrics()
HISTOGRAM_PARTS = ("bucket", "sum", "count")
# Label -> the dashboard variable that filters it ($policy, $pool are multi-value: regex matchers).
VARIABLE_LABELS = {"policy": "$policy", "pool": "$pool"}

Matcher = str | tuple[str, str]  # "value" (=) or (operator, value), e.g. ("=~", "a|b")


def series(metric: Any, part: str = "") -> str:
    """The scraped name of a prometheus_client metric object (``part``: bucket, sum or count of a histogram)."""
    kind, base = metric._type, metric._name
    if kind == "histogram":
        if part not in HISTOGRAM_PARTS:
            raise ValueError(f"{base}: a histogram needs part in {HISTOGRAM_PARTS}, got {part!r}")
        return f"{base}_{part}"
    if part:
        raise ValueError(f"{base}: a {kind} has no part {part!r}")
    return f"{base}_total" if kind == "counter" else base


def labels_of(metric: Any, part: str = "") -> tuple[str, ...]:
    extra = ("le",) if part == "bucket" else ()
    return (*metric._labelnames, *extra)


def matchers(allowed: tuple[str, ...], name: str, **given: Matcher) -> str:
    """``{a="x",b=~"y"}`` from the given matchers plus the variable ones for labels in ``allowed``."""
    out = {label: ("=~", var) for label, var in VARIABLE_LABELS.items() if label in allowed}
    for label, m in given.items():
        if label not in allowed:
            raise ValueError(f"{name} has no label {label!r} (labels: {', '.join(allowed)})")
        out[label] = ("=", m) if isinstance(m, str) else m
    return "{" + ",".join(f'{k}{op}"{v}"' for k, (op, v) in out.items()) + "}" if out else ""


def sel(metric: Any, part: str = "", **given: Matcher) -> str:
    """A selector of one planner or router metric, filtered by the dashboard's variables."""
    name = series(metric, part)
    return name + matchers(labels_of(metric, part), name, **given)


def planner_label_sets() -> dict[str, set[str]]:
    """Every series the planner and the router can export, with its label names (for query checks)."""
    out: dict[str, set[str]] = {}
    for owner in (PLANNER, ROUTER):
        for metric in vars(owner).values():
            if not hasattr(metric, "_labelnames"):
                continue
            parts = HISTOGRAM_PARTS if metric._type == "histogram" else ("",)
            for part in parts:
                out[series(metric, part)] = set(labels_of(metric, part))
    return out
