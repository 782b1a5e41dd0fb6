"""The operators' Grafana dashboard, generated as plain JSON (``python -m planner.dashboards`` rewrites
dashboards/planner.json; tests keep the committed file equal to this output).

Provisioning-ready (INTEGRATION.md §5): schemaVersion 41, ``id: null``, a stable ``uid``, a datasource
variable instead of ``__inputs``. Every query names only series the planner exports (planner/telemetry.py)
or the engine dialects read (planner/sources/dialects.py); a test enforces it. SLA lines come from
dashboard variables because the SLA lives in the policy file, not in a metric.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

UID = "planner-overview"
DS = {"type": "prometheus", "uid": "${datasource}"}
P = 'policy="$policy"'


def _target(expr: str, legend: str, ref: str, instant: bool = False) -> dict[str, Any]:
    return {"refId": ref, "expr": expr, "legendFormat": legend, "range": not instant, "instant": instant,
            "datasource": DS}


def _panel(pid: int, title: str, targets: list[tuple[str, str]], grid: tuple[int, int, int, int], *,
           kind: str = "timeseries", unit: str = "short", description: str = "", instant: bool = False,
           thresholds: list[tuple[float | None, str]] | None = None, min_: float | None = 0) -> dict[str, Any]:
    x, y, w, h = grid
    steps = [{"color": c, "value": v} for v, c in (thresholds or [(None, "green")])]
    defaults: dict[str, Any] = {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}}
    if min_ is not None:
        defaults["min"] = min_
    options: dict[str, Any] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                               "tooltip": {"mode": "multi", "sort": "none"}}
    if kind == "stat":
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "colorMode": "background", "graphMode": "none", "textMode": "value_and_name",
                   "justifyMode": "auto", "orientation": "auto"}
    return {"id": pid, "type": kind, "title": title, "description": description, "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": x, "y": y},
            "targets": [_target(e, legend, chr(ord("A") + i), instant) for i, (e, legend) in enumerate(targets)],
            "fieldConfig": {"defaults": defaults, "overrides": []}, "options": options}


def _row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {"id": pid, "type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}


def panels() -> list[dict[str, Any]]:
    n = iter(range(1, 100))
    return [*_load_and_replicas(n), *_latency_and_decisions(n), *_health(n)]


def _load_and_replicas(n: Iterator[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    out.append(_row(next(n), "Load", 0))
    out.append(_panel(next(n), "Offered load vs forecast", [
        (f"planner_observed_rate_rps{{{P}}}", "observed {{pool}}"),
        (f'planner_forecast_mean{{{P},signal="rate_rps"}}', "forecast mean"),
        (f'planner_forecast_quantile{{{P},signal="rate_rps"}}', "forecast q{{quantile}}"),
    ], (0, 1, 16, 8), unit="reqps", description="Requests started per second (observed, per pool) and the "
                                                 "forecast at the decision horizon (start-up + interval)."))
    out.append(_panel(next(n), "Sequence lengths (forecast)", [
        (f'planner_forecast_mean{{{P},signal=~"isl_tokens|osl_tokens"}}', "{{signal}} mean"),
    ], (16, 1, 8, 8), description="Mean input / output tokens the decision sized for."))
    out.append(_row(next(n), "Replicas and GPUs", 9))
    out.append(_panel(next(n), "Desired vs ready replicas", [
        (f"planner_desired_replicas{{{P}}}", "desired {{pool}}"),
        (f"planner_ready_replicas{{{P}}}", "ready {{pool}}"),
        (f"planner_desired_unclamped_replicas{{{P}}}", "SLA model {{pool}} (before limits)"),
    ], (0, 10, 16, 8), description="What the planner asks for, what is serving, and what the SLA model wanted "
                                   "before stabilisation, rate limits, floors, ceilings and the GPU budget."))
    out.append(_panel(next(n), "GPUs", [
        (f"planner_gpus_in_use{{{P}}}", "in use (ready)"),
        (f"planner_gpus_desired{{{P}}}", "desired"),
    ], (16, 10, 8, 8)))
    return out


def _latency_and_decisions(n: Iterator[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    out.append(_row(next(n), "Latency vs SLA", 18))
    out.append(_panel(next(n), "TTFT p95: observed vs predicted vs SLA", [
        (f'planner_observed_ttft_seconds{{{P},stat="p95"}}', "observed p95 {{pool}}"),
        (f'planner_predicted_ttft_seconds{{{P},pool="all"}}', "predicted"),
        ("vector($ttft_sla_seconds)", "SLA"),
    ], (0, 19, 8, 8), unit="s"))
    out.append(_panel(next(n), "ITL p95: observed vs predicted vs SLA", [
        (f'planner_observed_itl_seconds{{{P},stat="p95"}}', "observed p95 {{pool}}"),
        (f"planner_predicted_itl_seconds{{{P}}}", "predicted {{pool}}"),
        ("vector($itl_sla_seconds)", "SLA"),
    ], (8, 19, 8, 8), unit="s"))
    out.append(_panel(next(n), "Engines: TTFT / ITL p95 by role (vLLM)", [
        ("histogram_quantile(0.95, sum by (role, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
         "TTFT {{role}}"),
        ("histogram_quantile(0.95, sum by (role, le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))",
         "ITL {{role}}"),
    ], (16, 19, 8, 8), unit="s", description="Straight from the engines (needs the role label from "
                                             "PodMonitor relabelling); a cross-check of the planner's view."))
    out.append(_row(next(n), "Decisions", 27))
    out.append(_panel(next(n), "Last decision reasons", [
        (f"planner_last_decision_reason{{{P}}} == 1", "{{reason}}"),
    ], (0, 28, 8, 8), kind="stat", instant=True, thresholds=[(None, "blue")],
        description="Reason codes of the last decision (closed set: planner.types.Reason)."))
    out.append(_panel(next(n), "Decisions by reason", [
        (f"sum by (reason) (increase(planner_decisions_total{{{P}}}[$__rate_interval]))", "{{reason}}"),
    ], (8, 28, 8, 8)))
    out.append(_panel(next(n), "Calibration factors", [
        (f"planner_calibration_factor{{{P}}}", "{{factor}}"),
    ], (16, 28, 8, 8), min_=None, description="Observed/predicted correction applied to the profile "
                                              "(bounded; 1 = trust the profile)."))
    return out


def _health(n: Iterator[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    out.append(_row(next(n), "Health", 36))
    out.append(_panel(next(n), "Readiness", [
        (f"planner_ready{{{P}}}", "ready"),
    ], (0, 37, 4, 8), kind="stat", instant=True, thresholds=[(None, "red"), (1, "green")],
        description="0 = degraded: a needed signal has been missing for the configured number of intervals."))
    out.append(_panel(next(n), "Seconds since last good signal", [
        (f"planner_signal_seconds_since_good{{{P}}}", "{{signal}}"),
        (f"planner_signal_missing{{{P}}} == 1", "missing {{signal}}"),
    ], (4, 37, 8, 8), unit="s"))
    out.append(_panel(next(n), "Tick and read duration p95", [
        (f"histogram_quantile(0.95, sum by (le) (rate(planner_tick_duration_seconds_bucket{{{P}}}[5m])))",
         "tick"),
        (f"histogram_quantile(0.95, sum by (le) (rate(planner_observation_read_seconds_bucket{{{P}}}[5m])))",
         "metrics read"),
    ], (12, 37, 6, 8), unit="s"))
    out.append(_panel(next(n), "Errors", [
        (f"sum by (kind) (rate(planner_errors_total{{{P}}}[5m]))", "{{kind}}"),
    ], (18, 37, 6, 8), unit="ops"))
    return out


def _textbox(name: str, label: str, value: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "textbox", "query": value, "hide": 0,
            "current": {"text": value, "value": value}, "options": [{"selected": True, "text": value, "value": value}]}


def build_dashboard() -> dict[str, Any]:
    return {
        "id": None, "uid": UID, "title": "Planner: SLA autoscaling (prefill / decode)",
        "tags": ["planner", "llm", "autoscaling"], "timezone": "browser", "schemaVersion": 41, "version": 1,
        "editable": True, "graphTooltip": 1, "refresh": "30s", "time": {"from": "now-3h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus", "hide": 0},
            {"name": "policy", "label": "Policy", "type": "query", "datasource": DS,
             "query": {"query": "label_values(planner_ready, policy)", "refId": "policy"},
             "definition": "label_values(planner_ready, policy)", "refresh": 2, "multi": False,
             "includeAll": False, "sort": 1},
            _textbox("ttft_sla_seconds", "TTFT SLA (s)", "1"),
            _textbox("itl_sla_seconds", "ITL SLA (s)", "0.04"),
        ]},
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m planner.dashboards [PATH]``: write the dashboard (default dashboards/planner.json)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "dashboards" / "planner.json"
    path.write_text(render())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
