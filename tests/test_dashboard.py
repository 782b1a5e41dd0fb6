"""The generated dashboards and alert rules: committed files equal the generator's output, every query names
only series that exist with labels they have, every expression parses (promtool), the JSON passes Grafana's
schema as grafana-foundation-sdk models it, and the layout is provisioning-ready."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.dashboards import (
    PROMETHEUS_RULE,
    RULES_FILE,
    build_dashboard,
    engine_dashboards,
    generated_files,
)
from planner.dashboards.alerts import VIOLATION, AlertParams, alerts, prometheus_rule, rule_groups
from planner.dashboards.names import PLANNER, planner_label_sets, sel, series
from planner.sources.dialects import DIALECTS

REPO = Path(__file__).resolve().parent.parent
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                "unless", "sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile", "stddev", "stdvar",
                "count_values", "group", "inf", "nan"}
# Grafana's macros and our variables, as a test substitutes them to send a query to Prometheus.
MACROS = {"$__rate_interval": "1m", "$__range_s": "300", "$__range": "5m", "$__interval": "15s", "$policy": ".*",
          "$pool": ".*"}


def dialect_series() -> dict[str, set[str]]:
    names: set[str] = set()
    for d in DIALECTS.values():
        names.update({d.presence_gauge, d.running_gauge, d.queue_gauge, d.completed_counter, *d.in_system_gauges,
                      d.isl.numerator, d.isl.denominator, d.osl.numerator, d.osl.denominator})
        for hist in (d.ttft_histogram, d.itl_histogram):
            names.update({f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"})
        if d.kv_usage_gauge:
            names.add(d.kv_usage_gauge)
    return {n: set() for n in names}  # engine labels vary by deployment: names only


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


def dashboards() -> dict[str, dict[str, Any]]:
    return {"planner.json": build_dashboard(), **engine_dashboards()}


def panel_exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def variable_exprs(dashboard: dict) -> list[str]:
    return [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def all_exprs() -> list[str]:
    out = [e for d in dashboards().values() for e in panel_exprs(d)]
    return out + [r["expr"] for g in rule_groups()["groups"] for r in g["rules"]]


def substitute(expr: str) -> str:
    for macro, value in sorted(MACROS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(macro, value)
    return expr


def test_committed_files_are_the_generators_output() -> None:
    for rel, text in generated_files().items():
        assert (REPO / rel).read_text() == text, f"{rel}: regenerate with: python -m planner.dashboards"


def test_the_generator_rewrites_every_file(tmp_path: Path) -> None:
    """`python -m planner.dashboards ROOT` writes every committed file (no argument: the repository)."""
    out = subprocess.run([sys.executable, "-m", "planner.dashboards", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert written == set(generated_files())
    assert {f"engines-{d}.json" for d in DIALECTS} <= {p.name for p in written}
    for rel in written:
        assert (tmp_path / rel).read_text() == (REPO / rel).read_text(), rel


@pytest.mark.parametrize("expr,expected", [
    ('sum by (role, le) (rate(vllm:time_to_first_token_seconds_bucket{a="x{y}"}[5m]))',
     [("vllm:time_to_first_token_seconds_bucket", {"a"})]),
    ('planner_ready{policy="$policy"} == 1', [("planner_ready", {"policy"})]),
    ("label_values(planner_ready, policy)", [("planner_ready", set()), ("policy", set())]),
    ("rate(made_up_total[5m]) offset 5m", [("made_up_total", set())]),
], ids=["histogram", "comparison", "label-values", "offset"])
def test_selector_extraction(expr: str, expected: list) -> None:
    assert selectors(expr) == expected


@pytest.mark.parametrize("call,error", [
    (lambda: series(PLANNER.tick_duration), "needs part"),
    (lambda: series(PLANNER.ready, "sum"), "has no part"),
    (lambda: sel(PLANNER.ready, pool="decode"), "has no label 'pool'"),
], ids=["histogram-without-part", "gauge-with-part", "unknown-label"])
def test_names_refuse_what_telemetry_does_not_define(call, error: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=error):
        call()


def test_selectors_follow_the_metric_objects() -> None:
    assert sel(PLANNER.desired_replicas) == 'planner_desired_replicas{policy=~"$policy",pool=~"$pool"}'
    assert sel(PLANNER.decisions) == 'planner_decisions_total{policy=~"$policy"}'
    assert sel(PLANNER.observed_ttft, stat="p95").endswith(',stat="p95"}')


def test_every_query_names_only_series_that_exist_with_labels_they_have() -> None:
    known = {**planner_label_sets(), **dialect_series(), VIOLATION: {"policy", "pool", "stat", "signal"},
             "up": set()}
    found: set[str] = set()
    exprs = all_exprs() + [e for d in dashboards().values() for e in variable_exprs(d)]
    for expr in exprs:
        for name, used in selectors(expr):
            if name == "policy" or name == "pool":  # label_values(metric, label): the label argument
                continue
            assert name in known, f"{expr}: {name} is not exported by the planner or read from an engine"
            found.add(name)
            if known[name] and name != "up":
                assert used <= known[name], f"{expr}: {name} has no label(s) {used - known[name]}"
    planner = {n for n in found if n.startswith("planner_")}
    histogram_parts = {series(PLANNER.tick_duration, "count"), series(PLANNER.tick_duration, "bucket"),
                       series(PLANNER.read_duration, "bucket")}
    everything = {n for n in planner_label_sets() if not n.endswith(("_sum", "_count", "_bucket"))}
    assert planner == everything | histogram_parts, "every planner metric is on a dashboard or in an alert"
    for d in DIALECTS.values():
        assert {d.presence_gauge, d.queue_gauge, d.completed_counter, f"{d.ttft_histogram}_bucket",
                f"{d.itl_histogram}_bucket", d.isl.numerator, d.osl.denominator} <= found, d.name


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    return path


def check_rules(promtool: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_alert_rules_pass_promtool(promtool: str, tmp_path: Path) -> None:
    out = check_rules(promtool, REPO / RULES_FILE)
    from planner.dashboards.alerts import alerts

    expected = len(alerts()) + 1  # every alert and the SLA-violation recording rule
    assert expected == 11 and f"SUCCESS: {expected} rules found" in out.stdout and out.returncode == 0, \
        out.stdout + out.stderr
    operator = yaml.safe_load((REPO / PROMETHEUS_RULE).read_text())
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(operator["spec"]))
    assert check_rules(promtool, tmp_path / "spec.yaml").returncode == 0
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [{"alert": "A", "expr": "up >"}]}]}))
    assert check_rules(promtool, broken).returncode != 0  # promtool does reject a bad expression


def test_every_panel_query_parses(promtool: str, tmp_path: Path) -> None:
    """Each query (macros substituted as Grafana would) as a recording rule: promtool parses them all."""
    exprs = [substitute(e) for d in dashboards().values() for e in panel_exprs(d)]
    rules = [{"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    out = check_rules(promtool, path)
    assert out.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in out.stdout, out.stdout + out.stderr


def test_alerts_say_what_and_what_to_do() -> None:
    names = [a.name for a in alerts()]
    assert len(names) == len(set(names))
    assert {"PlannerSLABurnFast", "PlannerSLABurnSlow", "PlannerControllerDown", "PlannerControllerStale",
            "PlannerPoolPinned", "PlannerActuationFailing", "PlannerNotReady", "PlannerLeaderMissing"} <= set(names)
    for group in rule_groups()["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, rule["alert"]
                assert rule["for"] and rule["labels"]["severity"] in ("warning", "critical")
    short = AlertParams(pinned_for="3s", stale_window="7s")
    pinned = next(a for a in alerts(short) if a.name == "PlannerPoolPinned")
    assert pinned.for_ == "3s" and "[7s]" in next(a for a in alerts(short) if a.name == "PlannerControllerStale").expr
    assert prometheus_rule()["spec"] == rule_groups()


def _lost(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """What of ``ours`` the SDK's round trip dropped or changed (it may add defaults)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [p for k, v in ours.items()
                for p in ([f"{path}/{k}"] if k not in theirs else _lost(v, theirs[k], f"{path}/{k}"))]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [p for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for p in _lost(a, b, f"{path}[{i}]")]
    return [] if ours == theirs else [f"{path}: {ours!r} became {theirs!r}"]


@pytest.mark.filterwarnings("ignore:Prefer using dashboardv2")  # v1 JSON is what file provisioning loads
@pytest.mark.parametrize("name", sorted(dashboards()))
def test_dashboard_passes_grafanas_schema(name: str) -> None:
    """grafana-foundation-sdk (Grafana's own generated models): every field we write survives a decode and
    encode through the typed Dashboard, its panels' options and the Prometheus query model."""
    sdk = pytest.importorskip("grafana_foundation_sdk")
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard, RowPanel

    plugins.register_default_plugins()
    ours = json.loads((REPO / "dashboards" / name).read_text())
    model = Dashboard.from_json(ours)
    theirs = json.loads(JSONEncoder().encode(model))
    assert _lost(ours, theirs) == ["/id"]  # id null (what provisioning wants) is omitted on encode
    panels = [p for p in model.panels or [] if not isinstance(p, RowPanel)]
    assert {type(p.options).__module__.rsplit(".", 1)[-1] for p in panels} == {p.type_val for p in panels}, \
        "each panel's options decode into its panel type's model"
    queries = [t for p in panels for t in (p.targets or [])]
    assert queries and all(type(q).__module__.endswith("models.prometheus") for q in queries), sdk.__name__
    bad = json.loads(json.dumps(ours))
    bad["panels"][1]["gridPos"]["width"] = bad["panels"][1]["gridPos"].pop("w")
    assert _lost(bad, json.loads(JSONEncoder().encode(Dashboard.from_json(bad))))  # a misspelt field is caught


@pytest.mark.parametrize("name", sorted(dashboards()))
def test_provisioning_shape(name: str) -> None:
    d = json.loads((REPO / "dashboards" / name).read_text())
    assert d["schemaVersion"] == 41 and d["id"] is None and d["uid"].startswith("planner-")
    assert "__inputs" not in d and "${DS_" not in json.dumps(d)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"] == {"name": "datasource", "label": "Prometheus", "type": "datasource",
                                       "query": "prometheus", "hide": 0}
    assert variables["pool"]["includeAll"] and variables["pool"]["allValue"] == ".*"
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


def test_planner_dashboard_has_the_operators_panels() -> None:
    titles = {p["title"] for p in build_dashboard()["panels"]}
    assert {"Offered load vs forecast", "Desired vs ready replicas", "GPUs", "GPU-hours in the time range",
            "TTFT: observed vs predicted vs SLA", "ITL: observed vs predicted vs SLA", "SLA error-budget burn (1 h)",
            "Last decision reasons", "Decisions by reason", "Calibration factors", "Signal freshness",
            "Signal resolution (p95 at the SLA)", "Readiness", "Leader", "Errors and conflicts",
            "Engine replicas by state", "Requests by outcome"} <= titles
    uids = {d["uid"] for d in dashboards().values()}
    assert len(uids) == len(dashboards())


def test_every_alert_has_its_runbook_section() -> None:
    guide = (REPO / "docs" / "deploy.md").read_text()
    for a in alerts():
        assert f"\n#### {a.name}\n" in guide, f"docs/deploy.md lacks the runbook section of {a.name}"
        assert a.rule("docs/deploy.md#")["annotations"]["runbook_url"] == f"docs/deploy.md#{a.name.lower()}"


def test_kustomize_ships_one_config_map_per_dashboard() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    out = subprocess.run([kubectl, "kustomize", str(REPO / "dashboards")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    maps = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(name for cm in maps for name in cm["data"]) == sorted(dashboards())
    assert all(cm["metadata"]["labels"] == {"grafana_dashboard": "1"} for cm in maps)
