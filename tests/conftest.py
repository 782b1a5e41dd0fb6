"""Shared test fixtures: paths to the repository, shipped data and the shared/ folder beside the repo."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.exists():
        pytest.skip(f"shared data folder {SHARED} not present")
    return SHARED
