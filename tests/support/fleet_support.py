"""Helpers for the fleet tests (no tests here): fleet files of example policies written to a folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.decide_support import REPO, example_data, merge

PROFILE_PATH = REPO / "profiles" / "h200" / "qwen3-32b.json"


def member(name: str, priority: int = 0, **over: Any) -> tuple[str, int, Mapping[str, Any]]:
    return name, priority, over


def write_fleet(folder: Path, members: Sequence[tuple[str, int, Mapping[str, Any]]], max_gpus: int = 64,
                prices: Mapping[str, float] | None = None, extra: Mapping[str, Any] | None = None) -> Path:
    """fleet.yaml in ``folder`` with one policy file per member (the example policy, renamed, with overrides)."""
    (folder / "policies").mkdir(parents=True, exist_ok=True)
    entries = []
    for name, priority, over in members:
        data = merge(example_data(), {"name": name, "profile": str(PROFILE_PATH), **over})
        (folder / "policies" / f"{name}.yaml").write_text(yaml.safe_dump(data))
        entries.append({"policy": f"policies/{name}.yaml", "priority": priority})
    budget: dict[str, Any] = {"max_gpus": max_gpus}
    if prices is not None:
        budget["gpu_cost_per_hour"] = dict(prices)
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump({"budget": budget, "policies": entries, **(extra or {})}))
    return path
