"""The planner as `pip install .` (not -e) leaves it: a wheel built from a fresh clone carries every shipped
profile, trace and policy (planner/shipped/ links to profiles/ and policies/; the build copies them), and an
install of it finds them with no checkout anywhere near: `planner demo`, the benches' defaults and profile
requests by model name all read planner/catalog.py ``shipped_root``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.clone import clone_head

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh clone, the wheel pip builds from it)."""
    root = tmp_path_factory.mktemp("wheel")
    clone = clone_head(root / "src")
    dist = root / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist),
                           str(clone)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = dist.glob("planner-*.whl")
    return clone, wheel


def _tracked(clone: Path, *folders: str) -> set[str]:
    out = subprocess.run(["git", "-C", str(clone), "ls-files", *folders], capture_output=True, text=True,
                         check=True).stdout.split()
    return set(out)


def test_the_wheel_carries_every_shipped_profile_trace_and_policy(built: tuple[Path, Path]) -> None:
    clone, wheel = built
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = _tracked(clone, "profiles", "policies")
    assert {"profiles/hardware.yaml", "policies/example.yaml", "policies/search/knobs.yaml",
            "profiles/traces/servegen/aggregate_rate_language_m-large.csv"} <= shipped
    missing = sorted(f"planner/shipped/{f}" for f in shipped if f"planner/shipped/{f}" not in names)
    assert not missing, missing
    # The copies are the files, not links: their bytes are the checkout's.
    with zipfile.ZipFile(wheel) as z:
        assert z.read("planner/shipped/policies/example.yaml") == (clone / "policies/example.yaml").read_bytes()


def test_an_installed_wheel_runs_the_demo_away_from_any_checkout(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, wheel = built
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PLANNER_DATA_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)  # the installed copy first, ahead of this tree's editable install

    def planner(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=600)

    where = planner("-c", "import planner.catalog as c; print(c.shipped_root()); print(c.load_model('qwen3-32b').name)")
    root, model = where.stdout.split()
    assert Path(root) == site / "planner" / "shipped" and model == "qwen3-32b", where
    demo = planner("-m", "planner.cli", "demo", "--minutes", "2", "--warmup-minutes", "1", "--baselines", "static",
                   "--no-plots", "--out", "demo")
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert (elsewhere / "demo" / "backtest" / "report.json").is_file() and "qwen3-32b" in demo.stdout
    grid = planner("-c", "from planner.bench.knob_search import grid_path, load_grid; "
                   "print(grid_path(None)); print(len(load_grid(grid_path(None))))")
    assert grid.returncode == 0, grid.stderr[-2000:]
    path, keys = grid.stdout.split()
    assert Path(path) == site / "planner" / "shipped" / "policies" / "search" / "knobs.yaml" and int(keys) > 0
