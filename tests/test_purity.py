"""The pure core (perf, forecast, decide) imports no I/O library and never reads the clock; nor does the
simulated cluster (planner/sim/cluster), so that a replay is a function of its trace, profile and controller."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PURE = ("perf", "forecast", "decide")
SIMULATED = ("sim/cluster",)
FORBIDDEN_MODULES = {"httpx", "requests", "kubernetes", "fastapi", "prometheus_api_client", "prometheus_client",
                     "grpc", "apscheduler", "uvicorn", "socket", "urllib", "subprocess"}
FORBIDDEN_CALLS = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("datetime", "now"),
                   ("datetime", "utcnow"), ("date", "today"), ("time", "sleep")}


def _files(repo: Path) -> list[Path]:
    return [p for pkg in PURE for p in (repo / "planner" / pkg).rglob("*.py")]


def test_pure_packages_exist(repo) -> None:
    assert _files(repo), "no pure-core files found"


@pytest.mark.parametrize("pkg", (*PURE, *SIMULATED))
def test_no_io_imports_or_clock_reads(repo, pkg) -> None:
    problems = []
    for path in (repo / "planner" / pkg).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN_MODULES:
                    problems.append(f"{path.name}:{node.lineno} imports {name}")
                if name.startswith("planner.") and name.split(".")[1] in {"sources", "actuators", "service",
                                                                          "catalog", "cli", "commands"}:
                    problems.append(f"{path.name}:{node.lineno} imports I/O module {name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                base = node.func.value
                base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
                if (base_name, node.func.attr) in FORBIDDEN_CALLS:
                    problems.append(f"{path.name}:{node.lineno} calls {base_name}.{node.func.attr}()")
    assert not problems, problems
