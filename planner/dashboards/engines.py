"""One engine dashboard per dialect, every name from the dialect's own definition (sources/dialects.py).

The same series the planner reads (presence, running and queued gauges, the completed counter, the
TTFT/ITL histograms, the ISL/OSL ratios, KV usage), straight from the engines and by ``pool`` (the label
the PodMonitors in deploy/engines/ set). The SLA line is the planner's ``planner_sla_seconds``.
"""

from __future__ import annotations

from planner.dashboards.grafana import (
    Board,
    Panel,
    Query,
    Row,
    board_link,
    datasource_variable,
    query_variable,
)
from planner.dashboards.slo import sla_target
from planner.sources.dialects import DIALECTS, Dialect, Ratio

RATE = "$__rate_interval"
POOL = '{pool=~"$pool"}'
TAG = "planner-engines"


def uid(dialect: Dialect) -> str:
    return f"planner-engines-{dialect.name}"


def file_name(dialect: Dialect) -> str:
    return f"engines-{dialect.name}.json"


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q:g}, sum by (pool, le) (rate({histogram}_bucket{POOL}[{RATE}])))"


def _mean(ratio: Ratio) -> str:
    return (f"sum by (pool) (rate({ratio.numerator}{POOL}[{RATE}])) / "
            f"sum by (pool) (rate({ratio.denominator}{POOL}[{RATE}]))")


def _traffic(d: Dialect) -> Row:
    gauges = dict.fromkeys((d.running_gauge, d.queue_gauge, *d.in_system_gauges))  # ordered, no repeats
    return Row("Traffic", (
        Panel("Ready replicas", (
            Query(f"count by (pool) (count by (pool, {d.replica_label}) ({d.presence_gauge}{POOL}))", "{{pool}}"),
        ), width=6, description=f"Distinct {d.replica_label} values among the fresh {d.presence_gauge} series: "
                                "what the planner counts as ready."),
        Panel("Completed requests per second", (
            Query(f"sum by (pool) (rate({d.completed_counter}{POOL}[{RATE}]))", "{{pool}}"),
        ), width=6, unit="reqps", description=f"{d.completed_counter}, any finish reason. The planner adds "
                                              "the change of the in-system gauges to get requests started."),
        Panel("Requests in the engines", tuple(Query(f"sum by (pool) ({g}{POOL})", f"{g} {{{{pool}}}}")
                                                for g in gauges), width=12),
    ))


def _latency(d: Dialect) -> Row:
    itl = d.itl_note or "Token-weighted inter-token latency."
    return Row("Latency", (
        Panel("TTFT p50 / p95 vs SLA", (
            Query(_quantile(0.5, d.ttft_histogram), "p50 {{pool}}"),
            Query(_quantile(0.95, d.ttft_histogram), "p95 {{pool}}"),
            Query(sla_target("ttft"), "SLA {{policy}}"),
        ), width=12, unit="s", description=f"From {d.ttft_histogram}; the SLA from the planner's policies."),
        Panel("ITL p50 / p95 vs SLA", (
            Query(_quantile(0.5, d.itl_histogram), "p50 {{pool}}"),
            Query(_quantile(0.95, d.itl_histogram), "p95 {{pool}}"),
            Query(sla_target("itl"), "SLA {{policy}}"),
        ), width=12, unit="s", description=f"From {d.itl_histogram}. {itl}."),
    ))


def _work(d: Dialect) -> Row:
    panels = [Panel("Mean sequence lengths", (
        Query(_mean(d.isl), "input {{pool}}"),
        Query(_mean(d.osl), "output {{pool}}"),
    ), width=12, description="Per-request input and output tokens over the window, as the planner reads them.")]
    if d.kv_usage_gauge:
        scale = "" if d.kv_usage_scale == 1.0 else f" * {d.kv_usage_scale:g}"
        panels.append(Panel("KV-cache usage", (
            Query(f"avg by (pool) ({d.kv_usage_gauge}{POOL}){scale}", "mean {{pool}}"),
            Query(f"max by (pool) ({d.kv_usage_gauge}{POOL}){scale}", "max {{pool}}"),
        ), width=12, unit="percentunit", thresholds=((None, "green"), (0.9, "red"))))
    return Row("Work", tuple(panels))


def board(d: Dialect) -> Board:
    pool = f"label_values({d.presence_gauge}, pool)"
    return Board(uid(d), f"Planner: {d.name} engines", (_traffic(d), _latency(d), _work(d)),
                 (datasource_variable(), query_variable("pool", "Pool", pool)),
                 tags=("planner", TAG, d.name), links=(board_link("Planner", "planner"),
                                                       board_link("Engines", TAG)))


def boards() -> dict[str, Board]:
    """File name -> dashboard, one per dialect."""
    return {file_name(d): board(d) for d in DIALECTS.values()}
