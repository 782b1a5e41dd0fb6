"""A fresh clone of this repository's committed state, alone in a folder: what a new user gets from `git clone`
(no ../shared beside it, no build outputs, nothing uncommitted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def clone_head(into: Path) -> Path:
    """``git clone`` of REPO checked out at its current commit, as ``into/planner`` (``into`` holds nothing else)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"{REPO} is not a git checkout ({e}): nothing to clone")
    dest = into / "planner"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", head], check=True)
    assert sorted(p.name for p in into.iterdir()) == ["planner"]
    return dest


def clone_env(clone: Path) -> dict[str, str]:
    """This interpreter's environment with the clone's planner first on the path (it wins over an editable
    install) and no override of where the shipped data lies."""
    env = {k: v for k, v in os.environ.items() if k not in ("PLANNER_DATA_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(clone)
    return env


def run_in_clone(clone: Path, args: list[str], timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    """``python args...`` with this interpreter, in the clone, on the clone's code."""
    return subprocess.run([sys.executable, *args], cwd=clone, env=clone_env(clone), capture_output=True, text=True,
                          timeout=timeout_s)
