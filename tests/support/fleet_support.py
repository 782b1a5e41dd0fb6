"""Helpers for the fleet tests (no tests here): fleet files of example policies written to a folder, and the fleet
stage's frontier invariant (tests/test_fleet_stage_properties.py says why)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from planner.decide.fleet import PolicyAsk, PoolAsk
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


def needed(pool: PoolAsk, share: float) -> int:
    """The fewest replicas of ``pool`` (not below its floor) that carry ``share`` of the load."""
    return next((c for c in range(pool.floor, pool.wanted + 1) if pool.carried(c) >= share), pool.wanted)


def wasted(policy: PolicyAsk, granted: dict[str, int]) -> list[str]:
    """The frontier invariant's breaches: pools holding more than the load their starved siblings carry needs."""
    out = []
    for a_name, a in policy.pools.items():
        if granted[a_name] >= a.wanted:
            continue
        share = a.carried(granted[a_name])
        for b_name, b in policy.pools.items():
            if b_name != a_name and granted[b_name] > max(b.floor, needed(b, share)):
                out.append(f"{b_name}={granted[b_name]} while {a_name}={granted[a_name]} carries {share:.3f}, "
                           f"for which {b_name} needs {needed(b, share)}")
    return out
