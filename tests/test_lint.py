"""ruff and mypy are part of the suite: the configuration in pyproject.toml is enforced, not advisory."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


@pytest.mark.parametrize("tool", [["ruff", "check", "."], ["mypy", "planner"]], ids=["ruff", "mypy"])
def test_clean(repo, tool) -> None:
    if shutil.which(tool[0]) is None and not (repo / ".venv" / "bin" / tool[0]).exists():
        pytest.skip(f"{tool[0]} not installed (pip install -e '.[dev]')")
    proc = subprocess.run([sys.executable, "-m", *tool], cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
