"""fleet.yaml (planner/fleet_file.py): what loads, and one line naming the key for what does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.errors import UserError
from planner.fleet_file import FleetBudget, load_fleet
from tests.support.fleet_support import member, write_fleet


def test_a_fleet_loads_with_priorities_prices_and_floors(tmp_path: Path) -> None:
    path = write_fleet(tmp_path, [member("chat", 10), member("batch", 0)], max_gpus=16, prices={"h200": 3.5})
    fleet = load_fleet(path)
    assert fleet.names() == ("chat", "batch") and fleet.max_gpus == 16
    assert [m.priority for m in fleet.members] == [10, 0]
    assert fleet.member("chat").floor_gpus > 0  # 1 prefill + 1 decode replica at the profile's GPUs each
    assert fleet.cost_per_gpu_hour("batch") == 3.5 and fleet.interval_s == 30.0
    assert fleet.budget.wake_first  # the default: a sleeping policy's wake comes before the priorities
    strict = load_fleet(_edit(path, budget={"max_gpus": 16, "wake_first": False}))
    assert strict.budget.wake_first is False


def _edit(path: Path, **top: object) -> Path:
    data = yaml.safe_load(path.read_text())
    data.update(top)
    path.write_text(yaml.safe_dump(data))
    return path


BAD = [
    ("unknown key", lambda p: _edit(p, budgets={}), "unknown key 'budgets'"),
    ("budget missing", lambda p: p.write_text("policies: [{policy: policies/a.yaml}]\n") and p, "key 'budget'"),
    ("max_gpus zero", lambda p: _edit(p, budget={"max_gpus": 0}), "key 'budget.max_gpus' = 0"),
    ("priority not an int", lambda p: _edit(p, policies=[{"policy": "policies/a.yaml", "priority": "high"}]),
     "key 'policies.0.priority'"),
    ("no policies", lambda p: _edit(p, policies=[]), "key 'policies'"),
    ("missing policy file", lambda p: _edit(p, policies=[{"policy": "nope.yaml"}]),
     "key 'policies.0.policy' = 'nope.yaml': nope.yaml: policy file not found"),
    ("negative price", lambda p: _edit(p, budget={"max_gpus": 64, "gpu_cost_per_hour": {"h200": -1}}),
     "key 'budget.gpu_cost_per_hour'"),
    ("unpriced GPU", lambda p: _edit(p, budget={"max_gpus": 64, "gpu_cost_per_hour": {"h100": 2.0}}),
     "key 'budget.gpu_cost_per_hour': no price for GPU 'h200'"),
    ("budget below the floors", lambda p: _edit(p, budget={"max_gpus": 1}), "key 'budget.max_gpus' = 1: below the "
     "policies' floors"),
    ("not a mapping", lambda p: p.write_text("- a\n") and p, "must be a YAML mapping"),
    ("not YAML", lambda p: p.write_text("budget: [\n") and p, "not valid YAML"),
    ("wake_first not a boolean", lambda p: _edit(p, budget={"max_gpus": 64, "wake_first": "sometimes"}),
     "key 'budget.wake_first'"),
]


@pytest.mark.parametrize(("edit", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_fleet_is_one_line_naming_the_key(tmp_path: Path, edit, message: str) -> None:  # noqa: ANN001
    path = edit(write_fleet(tmp_path, [member("a"), member("b")]))
    with pytest.raises(UserError) as err:
        load_fleet(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_duplicate_policy_names_are_refused(tmp_path: Path) -> None:
    path = write_fleet(tmp_path, [member("a"), member("b")])
    (tmp_path / "policies" / "b.yaml").write_text((tmp_path / "policies" / "a.yaml").read_text())
    with pytest.raises(UserError, match=r"key 'policies.1.policy': policy name 'a' is also policies.0's"):
        load_fleet(path)


def test_one_interval_for_the_whole_fleet(tmp_path: Path) -> None:
    path = write_fleet(tmp_path, [member("a"), member("b", interval_s=60)])
    with pytest.raises(UserError, match="same interval_s.*a 30, b 60"):
        load_fleet(path)


def test_a_bad_policy_names_the_fleet_entry_and_its_key(tmp_path: Path) -> None:
    path = write_fleet(tmp_path, [member("a"), member("b", sla={"ttft_ms": -1})])
    with pytest.raises(UserError, match=r"policies.1.policy.*key 'sla.ttft_ms' = -1"):
        load_fleet(path)


def test_budget_exactly_the_floors_loads(tmp_path: Path) -> None:
    fleet = load_fleet(write_fleet(tmp_path, [member("a"), member("b")]))
    floors = sum(m.floor_gpus for m in fleet.members)
    path = _edit(tmp_path / "fleet.yaml", budget={"max_gpus": floors})
    assert load_fleet(path).max_gpus == floors


def test_the_shipped_example_fleet_loads() -> None:
    fleet = load_fleet(Path(__file__).resolve().parents[1] / "fleets" / "example.yaml")
    assert len(fleet.members) == 3 and fleet.max_gpus >= sum(m.floor_gpus for m in fleet.members)
    assert sorted(m.priority for m in fleet.members) == [0, 5, 10]
    assert fleet.budget == FleetBudget(max_gpus=fleet.max_gpus, gpu_cost_per_hour={"h200": 3.5})  # defaults shown
