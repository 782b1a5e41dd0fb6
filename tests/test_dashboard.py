"""dashboards/planner.json: generated, provisioning-ready, and every query names only metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.dashboards import build_dashboard, render
from planner.sources.dialects import DIALECTS
from planner.telemetry import PlannerMetrics, exported_series_names

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "dashboards" / "planner.json"

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                "unless", "sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile", "stddev", "stdvar",
                "count_values", "group", "inf", "nan"}


def dialect_series() -> set[str]:
    names: set[str] = set()
    for d in DIALECTS.values():
        names.update({d.presence_gauge, d.running_gauge, d.queue_gauge, d.completed_counter, *d.in_system_gauges,
                      d.isl.numerator, d.isl.denominator, d.osl.numerator, d.osl.denominator})
        for hist in (d.ttft_histogram, d.itl_histogram):
            names.update({f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"})
        if d.kv_usage_gauge:
            names.add(d.kv_usage_gauge)
    return names


KNOWN = set(exported_series_names()) | dialect_series()


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) for every series selector in a PromQL expression."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values may contain anything
    text = re.sub(r"\[[^\]]*\]", "", text)  # range / subquery durations
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\boffset\s+\S+", "", text)
    out = []
    for m in re.finditer(r"(?<![\w:$])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?(\s*\()?", text):
        name, braces, call = m.group(1), m.group(2), m.group(3)
        if call and not braces or name.lower() in PROMQL_WORDS:
            continue  # a function call or a keyword, not a series
        labels = set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", braces or ""))
        out.append((name, labels))
    return out


def all_exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])] + [
        v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def test_committed_json_is_the_generators_output() -> None:
    assert COMMITTED.read_text() == render(), "regenerate with: python -m planner.dashboards"


@pytest.mark.parametrize("expr,expected", [
    ('sum by (role, le) (rate(vllm:time_to_first_token_seconds_bucket{a="x{y}"}[5m]))',
     [("vllm:time_to_first_token_seconds_bucket", {"a"})]),
    ('planner_ready{policy="$policy"} == 1', [("planner_ready", {"policy"})]),
    ("vector($ttft_sla_seconds)", []),
    ("label_values(planner_ready, policy)", [("planner_ready", set()), ("policy", set())]),
    ("rate(made_up_total[5m]) offset 5m", [("made_up_total", set())]),
], ids=["histogram", "comparison", "variable", "label-values", "offset"])
def test_selector_extraction(expr: str, expected: list) -> None:
    assert selectors(expr) == expected


def test_every_query_names_only_metrics_that_exist() -> None:
    dashboard = build_dashboard()
    found = {name for e in all_exprs(dashboard) for name, _ in selectors(e)} - {"policy"}  # label_values arg
    assert found, "no series found: the extractor is broken"
    assert found - KNOWN == set()
    assert {n for n in found if n.startswith("planner_")} >= {
        "planner_observed_rate_rps", "planner_forecast_mean", "planner_forecast_quantile",
        "planner_desired_replicas", "planner_ready_replicas", "planner_gpus_in_use",
        "planner_observed_ttft_seconds", "planner_predicted_ttft_seconds", "planner_observed_itl_seconds",
        "planner_predicted_itl_seconds", "planner_last_decision_reason", "planner_calibration_factor",
        "planner_signal_seconds_since_good", "planner_ready", "planner_tick_duration_seconds_bucket",
        "planner_errors_total"}


def test_planner_selectors_use_existing_labels() -> None:
    labels: dict[str, set[str]] = {}
    m = PlannerMetrics()
    for attr in vars(m).values():
        if hasattr(attr, "_labelnames") and hasattr(attr, "_name"):
            base = attr._name
            suffixes = {"Counter": ["_total"], "Histogram": ["_bucket", "_sum", "_count"]}.get(type(attr).__name__, [""])
            extra = {"le"} if type(attr).__name__ == "Histogram" else set()
            for s in suffixes:
                labels[base + s] = set(attr._labelnames) | (extra if s == "_bucket" else set())
    assert "planner_desired_replicas" in labels
    for expr in all_exprs(build_dashboard()):
        for name, used in selectors(expr):
            if name in labels:
                assert used <= labels[name], f"{expr}: {name} has no label(s) {used - labels[name]}"


def test_provisioning_shape() -> None:
    d = json.loads(COMMITTED.read_text())
    assert d["schemaVersion"] == 41 and d["id"] is None and d["uid"] == "planner-overview"
    assert "__inputs" not in d and "${DS_" not in json.dumps(d)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"] == {"name": "datasource", "label": "Prometheus", "type": "datasource",
                                       "query": "prometheus", "hide": 0}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            refs = [t["refId"] for t in p["targets"]]
            assert refs and len(refs) == len(set(refs))
    titles = {p["title"] for p in d["panels"]}
    assert {"Offered load vs forecast", "Desired vs ready replicas", "GPUs",
            "TTFT p95: observed vs predicted vs SLA", "ITL p95: observed vs predicted vs SLA",
            "Last decision reasons", "Calibration factors", "Seconds since last good signal", "Readiness",
            "Tick and read duration p95", "Errors"} <= titles
