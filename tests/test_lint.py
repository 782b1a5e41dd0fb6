"""ruff and mypy are part of the suite: the configuration in pyproject.toml is enforced, not advisory."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


@pytest.mark.parametrize("tool", [["ruff", "check", "."], ["mypy", "planner"]], ids=["ruff", "mypy"])
def test_clean(repo, tool, lint_runs) -> None:
    if shutil.which(tool[0]) is None and not (repo / ".venv" / "bin" / tool[0]).exists():
        pytest.skip(f"{tool[0]} not installed (pip install -e '.[dev]')")
    started = lint_runs.get(tuple(tool))  # conftest.py starts mypy at collection, to run beside other tests
    if started is not None:
        proc, out = started
        returncode = proc.wait(timeout=600)
        out.seek(0)
        text = out.read().decode(errors="replace")
        assert returncode == 0, text[-6000:]
        return
    done = subprocess.run([sys.executable, "-m", *tool], cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
