"""Tables piped to a file or a program are not cut to rich's 80-column default: the terminal's width where one is
attached, else full width (planner/commands/console.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _piped(argv: list[str], **env: str) -> str:
    """``planner argv`` with no terminal on stdin, stdout or stderr, as in CI or `planner ... > file`."""
    base = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run([sys.executable, "-m", "planner.cli", *argv], cwd=REPO, env={**base, **env},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


PLAN = ["plan", "--policy", "policies/example.yaml", "--rate-rps", "10", "--isl", "1000", "--osl", "100"]


def test_a_piped_table_is_printed_whole() -> None:
    out = _piped(PLAN)
    assert "…" not in out  # rich's ellipsis: a cell cut to fit
    header = next(line for line in out.splitlines() if "pool" in line and "replicas" in line)
    assert "GPUs/replica" in header and "pred. TTFT ms" in header and len(header) > 80
    assert "sla_capacity" in out


@pytest.mark.parametrize("columns", ["60", "200"])
def test_columns_still_sets_the_width(columns: str) -> None:
    widest = max(len(line) for line in _piped(PLAN, COLUMNS=columns).splitlines())
    assert widest <= int(columns) and (widest > 80) is (int(columns) > 80)
