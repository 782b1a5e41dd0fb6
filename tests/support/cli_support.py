"""What every CLI test of bad input checks: exit 2, one line naming the problem, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cli import run


def assert_refused(args: list[str], needle: str, capsys: pytest.CaptureFixture[str], out: Path) -> None:
    """``planner ARGS --out OUT`` exits 2 with one line containing ``needle`` on stderr and writes no ``out``."""
    rc = run([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
