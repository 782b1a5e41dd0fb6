"""The house matches its plan (DESIGN.md "Layout"): each folder holds what its name says, layers import
downwards only, there are no import cycles, and library errors name inputs, not command-line flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PLANNER = REPO / "planner"

# Modules whose messages still name flags until the mechanism of planner/errors.py is applied to them.
FLAG_MESSAGES_PENDING: set[str] = set()
FLAG = re.compile(r"--[a-z]")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PLANNER.rglob("*.py")}


def _imports(name: str) -> set[str]:
    """The planner modules ``name`` imports, at the top or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in MODULES:
                    out.add(sub)
                elif node.module in MODULES:
                    out.add(node.module)
    return out - {name}


def _strings_in_errors(tree: ast.AST) -> list[tuple[int, str]]:
    """String pieces of every raised exception and every ``...Error(...)`` built."""
    found: dict[int, tuple[int, str]] = {}
    for node in ast.walk(tree):
        is_error_call = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                         and node.func.id.endswith(("Error", "Exception")))
        if isinstance(node, ast.Raise) or is_error_call:
            found |= {id(n): (n.lineno, n.value) for n in ast.walk(node)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return sorted(found.values())


def _library_files() -> list[Path]:
    return [p for p in PLANNER.rglob("*.py")
            if p.relative_to(PLANNER).parts[0] not in ("commands", "cli.py") and "_pb2" not in p.name]


def test_library_errors_name_keys_not_flags() -> None:
    problems = []
    for path in _library_files():
        rel = str(path.relative_to(REPO))
        if rel in FLAG_MESSAGES_PENDING:
            continue
        problems += [f"{rel}:{line}: {text!r}" for line, text in _strings_in_errors(ast.parse(path.read_text()))
                     if FLAG.search(text)]
    assert not problems, "library errors must name the key (UserError(..., key=...)), not a flag:\n" + "\n".join(
        problems)


def test_the_flag_check_sees_a_flag_in_an_error() -> None:
    tree = ast.parse('def f(x):\n    raise UserError(f"--warmup-s: {x} must be >= 0")\n')
    assert [t for _, t in _strings_in_errors(tree) if FLAG.search(t)] == ["--warmup-s: "]


def test_pending_flag_messages_are_still_there() -> None:
    # Once a pending module is converted, drop it from the list so that the check covers it.
    for rel in FLAG_MESSAGES_PENDING:
        texts = [t for _, t in _strings_in_errors(ast.parse((REPO / rel).read_text()))]
        assert any(FLAG.search(t) for t in texts), f"{rel} no longer names flags: remove it from the list"


@pytest.mark.parametrize(("package", "forbidden"), [
    ("planner.sources", ("planner.emulator", "planner.service", "planner.commands", "planner.cli", "planner.bench",
                         "planner.testing", "planner.sim")),
    ("planner.telemetry", ("planner.service", "planner.commands", "planner.cli")),
    ("planner.signals", ("planner.service", "planner.commands", "planner.cli")),
    ("planner.forecast", ("planner.sim", "planner.service", "planner.commands", "planner.cli", "planner.bench")),
    ("planner.decide", ("planner.sim", "planner.service", "planner.commands", "planner.cli", "planner.bench",
                        "planner.policy_file", "planner.sources", "planner.actuators")),
    # The decision policy is the ground floor: it names no adapter and no registry (planner/policy_file.py,
    # above all of them, composes the file and checks names).
    ("planner.config", ("planner.sources", "planner.actuators", "planner.forecast", "planner.policy_file",
                        "planner.decide", "planner.sim", "planner.service", "planner.commands")),
    ("planner.schema", ("planner.",)),
    # Each adapter owns its settings and reads no policy file: the file is composed above them.
    ("planner.sources", ("planner.policy_file", "planner.actuators")),
    ("planner.actuators", ("planner.policy_file", "planner.sources.prometheus")),
    # The simulator's three parts (planner/sim/__init__.py): traces <- cluster <- evaluate.
    ("planner.sim.traces", ("planner.sim.cluster", "planner.sim.evaluate", "planner.bench", "planner.service",
                            "planner.commands", "planner.cli")),
    ("planner.sim.cluster", ("planner.sim.evaluate", "planner.bench", "planner.service", "planner.commands",
                             "planner.cli")),
    ("planner.sim.evaluate", ("planner.bench", "planner.service", "planner.commands", "planner.cli")),
], ids=["sources", "telemetry", "signals", "forecast", "decide", "config", "schema", "sources-settings",
        "actuators-settings", "sim.traces", "sim.cluster", "sim.evaluate"])
def test_layers_import_downwards_only(package: str, forbidden: tuple[str, ...]) -> None:
    problems = [f"{name} imports {dep}" for name in MODULES if name == package or name.startswith(package + ".")
                for dep in sorted(_imports(name)) if dep.startswith(forbidden)]
    assert not problems, problems


SIM_PARTS = ("traces", "cluster", "evaluate")


def test_sim_holds_its_three_parts_only() -> None:
    """Every simulator module lives in one of its three folders, and planner/sim/__init__.py imports nothing
    (callers import from the part that defines a name, not through a re-export)."""
    loose = [name for name in MODULES if name.startswith("planner.sim.") and name.split(".")[2] not in SIM_PARTS]
    assert not loose, f"modules beside planner/sim's parts {SIM_PARTS}: {loose}"
    assert {f"planner.sim.{part}" for part in SIM_PARTS} <= set(MODULES)
    assert not _imports("planner.sim")


def test_the_layer_check_sees_imports_between_sim_parts() -> None:
    # The downward edges exist, so that the layer check above has edges to judge (it passes on none).
    assert "planner.sim.cluster.cluster" in _imports("planner.sim.evaluate.replay")
    assert "planner.sim.traces.records" in _imports("planner.sim.cluster.cluster")


def test_no_import_cycles() -> None:
    graph = {name: _imports(name) for name in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, [" -> ".join(c) for c in cycles]


def _command_modules() -> set[str]:
    return {name for name, path in MODULES.items() if name.startswith("planner.commands.")
            and any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in ast.parse(path.read_text()).body)}


def test_no_command_module_imports_another() -> None:
    commands = _command_modules()
    assert {"planner.commands.decide", "planner.commands.demo", "planner.commands.emulate"} <= commands
    problems = [f"{name} imports {dep}" for name in commands for dep in _imports(name) if dep in commands]
    assert not problems, problems


def test_cli_imports_every_command_module_explicitly() -> None:
    tree = ast.parse((PLANNER / "cli.py").read_text())
    imported = {f"{n.module}.{a.name}" for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
                for a in n.names}
    assert _command_modules() <= imported
    assert "importlib" not in {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_bench_harnesses_live_in_planner_bench() -> None:
    from planner.cli import bench_app

    names = {c.name for c in bench_app.registered_commands}
    assert names == {"profile", "sim", "decide", "forecast", "observe", "suite", "seeds", "endpoint", "fidelity",
                     "fleet", "hours", "prefill"}
    assert {f"planner.bench.{n}" for n in names} <= set(MODULES)
