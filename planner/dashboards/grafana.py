"""Grafana dashboard JSON from panel specs: ids and grid positions assigned in order, provisioning-ready.

schemaVersion 41, ``id: null``, a stable ``uid``, a datasource variable instead of ``__inputs`` (so the
Grafana sidecar can load the file as is); every panel and query uses ``${datasource}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 41
GRID_WIDTH = 24
DS = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Query:
    """One PromQL query. ``needs`` names what must run for it to have data beyond a controller and its
    engines ("process": the process actuator, "router": ``planner route``, "router-failure": a replica
    failing behind it, "scale-to-zero": a request held at the router for a policy at zero, "leader": --leader-elect, "conflict": a 409 on a scale write, "degraded": a needed
    signal missing)."""

    expr: str
    legend: str = ""
    needs: str = ""


@dataclass(frozen=True)
class Panel:

    title: str
    queries: tuple[Query, ...]
    width: int = 8
    height: int = 8
    kind: str = "timeseries"
    unit: str = "short"
    description: str = ""
    instant: bool = False
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    min_value: float | None = 0


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]
    repeat: str = ""  # a variable name: Grafana repeats the row for each selected value


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    rows: tuple[Row, ...]
    variables: tuple[dict[str, Any], ...]
    tags: tuple[str, ...] = ()
    links: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def target(query: Query, ref: str, instant: bool) -> dict[str, Any]:
    return {"refId": ref, "expr": query.expr, "legendFormat": query.legend or "__auto", "range": not instant,
            "instant": instant, "datasource": DS}


def _options(kind: str) -> dict[str, Any]:
    if kind == "stat":
        return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "colorMode": "background", "graphMode": "none", "textMode": "value_and_name",
                "justifyMode": "auto", "orientation": "auto"}
    return {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"}}


def panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    steps = [{"color": c, "value": v} for v, c in p.thresholds]
    defaults: dict[str, Any] = {"unit": p.unit, "thresholds": {"mode": "absolute", "steps": steps}}
    if p.min_value is not None:
        defaults["min"] = p.min_value
    return {"id": pid, "type": p.kind, "title": p.title, "description": p.description, "datasource": DS,
            "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
            "targets": [target(q, chr(ord("A") + i), p.instant) for i, q in enumerate(p.queries)],
            "fieldConfig": {"defaults": defaults, "overrides": []}, "options": _options(p.kind)}


def row_json(r: Row, pid: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": pid, "type": "row", "title": r.title, "collapsed": False, "panels": [],
                           "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}}
    if r.repeat:
        out["repeat"] = r.repeat
    return out


def layout(rows: tuple[Row, ...]) -> list[dict[str, Any]]:
    """Rows top to bottom; panels left to right, wrapping at the grid's width."""
    out: list[dict[str, Any]] = []
    pid, y = 1, 0
    for r in rows:
        out.append(row_json(r, pid, y))
        pid, y, x, line_h = pid + 1, y + 1, 0, 0
        for p in r.panels:
            if x + p.width > GRID_WIDTH:
                x, y, line_h = 0, y + line_h, 0
            out.append(panel_json(p, pid, x, y))
            pid, x, line_h = pid + 1, x + p.width, max(line_h, p.height)
        y += line_h
    return out


def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus", "hide": 0}


def query_variable(name: str, label: str, query: str, multi: bool = True) -> dict[str, Any]:
    """A variable from ``label_values(...)``; multi-value with All (``.*``, which also matches no label)."""
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2, "multi": multi,
            "includeAll": multi, "allValue": ".*" if multi else None, "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if multi else {}}


def dashboard_json(b: Board) -> dict[str, Any]:
    return {
        "id": None, "uid": b.uid, "title": b.title, "tags": list(b.tags), "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1, "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"}, "annotations": {"list": []}, "links": list(b.links),
        "templating": {"list": list(b.variables)}, "panels": layout(b.rows),
    }


def board_link(title: str, tag: str) -> dict[str, Any]:
    """A dropdown of the dashboards with ``tag``, keeping time range and variables."""
    return {"title": title, "type": "dashboards", "tags": [tag], "asDropdown": True, "includeVars": True,
            "keepTime": True, "icon": "external link", "targetBlank": False, "tooltip": "", "url": ""}
