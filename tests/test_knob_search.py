"""`planner bench seeds --search`: reproducible draws from a grid of policy knobs, and the ranking after the runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.bench.knob_search import check, draw, load_grid, ranking, value_text, variants
from planner.cli import run
from planner.errors import UserError
from planner.policy_variant import PolicySource, vary_assignments

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "policies" / "example.yaml"
GRIDS = sorted((REPO / "policies" / "search").glob("*.yaml"))


def _loads(text: str) -> bool:
    try:
        PolicySource(EXAMPLE, vary_assignments(text)).load(EXAMPLE, "x")
    except UserError:
        return False
    return True


@pytest.mark.parametrize("path", GRIDS, ids=[p.name for p in GRIDS])
def test_every_value_of_the_shipped_grids_is_a_policy_the_example_takes(path: Path) -> None:
    grid = load_grid(path)
    assert len(grid) >= 8
    for key, values in grid.items():
        for v in values:
            assert _loads(f"{key}={value_text(v)}"), (key, v)


def test_draws_are_reproducible_distinct_and_from_the_grid() -> None:
    grid = load_grid(REPO / "policies" / "search" / "knobs.yaml")
    a, b, c = draw(grid, 20, 1, _loads), draw(grid, 20, 1, _loads), draw(grid, 20, 2, _loads)
    assert a == b and a != c and len(set(a)) == 20
    for text in a:
        pairs = dict(p.split("=", 1) for p in text.split(";"))
        assert list(pairs) == list(grid)  # one value per key, in the file's order
        assert all(pairs[k] in {value_text(v) for v in grid[k]} for k in grid)
        # The policy refuses a lean quantile above the conservative one; no draw holds one.
        assert float(pairs["sla.lean_quantile"]) <= float(pairs["forecast.quantile"])


def test_a_grid_too_small_for_the_search_is_one_line() -> None:
    grid = {"sla.lean_quantile": [0.7, 0.9], "forecast.quantile": [0.8]}  # 0.9 > 0.8: one variant only
    assert draw(grid, 1, 0, _loads) == ["sla.lean_quantile=0.7;forecast.quantile=0.8"]
    with pytest.raises(UserError, match="search: the grid holds only 1 distinct variants the policy takes, fewer than 2"):
        draw(grid, 2, 0, _loads)


def test_variants_of_a_reference_with_fields_set_keep_them() -> None:
    # A variant of a variant: the reference's own fields stay under the drawn ones (what loads is checked whole).
    ref = PolicySource(EXAMPLE, vary_assignments("forecast.quantile=0.8"))
    drawn = variants(ref, "ref", REPO / "policies" / "search" / "knobs.yaml", 5, 0)
    assert len(drawn) == 5 and all(_loads(t) for t in drawn)


@pytest.mark.parametrize(("content", "needle"), [
    ("sla.lean_quantil: [0.7]\n", "sla.lean_quantil=0.7: "),  # a typo in a key
    ("sla.lean_quantile: [0.7, 1.5]\n", "sla.lean_quantile=1.5: "),  # a value out of range
])
def test_a_grid_value_the_policy_refuses_is_named(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(content)
    with pytest.raises(UserError, match="^grid: ") as err:
        variants(PolicySource(EXAMPLE), "ref", path, 1, 0)
    assert f"{path}: {needle}" in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize(("value", "text"), [(0.75, "0.75"), (120, "120"), (True, "true"), ("ewma", "ewma"),
                                             ([{"type": "pods", "value": 1, "period_s": 60}],
                                              '[{"type": "pods", "value": 1, "period_s": 60}]')])
def test_value_text_reads_back_as_the_value(value: object, text: str) -> None:
    assert value_text(value) == text and yaml.safe_load(text) == value


@pytest.mark.parametrize(("content", "needle"), [
    ("- a\n- b\n", "expected a mapping of dotted policy keys"),
    ("sla.lean_quantile: []\n", "sla.lean_quantile: expected a non-empty list"),
    ("sla.lean_quantile: 0.7\n", "sla.lean_quantile: expected a non-empty list"),
    ("'sla..x': [1]\n", "is not a dotted policy key"),
    ("a: [1]\na: [2]\n", "found the key 'a' twice"),
    ("a: [1\n", "not valid YAML"),
])
def test_a_bad_grid_is_one_line_naming_the_file(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(content)
    with pytest.raises(UserError, match="^grid: ") as err:
        load_grid(path)
    assert needle in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_grid_not_utf8_or_missing_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_bytes(b"a: [1]\n\xff\n")
    with pytest.raises(UserError, match=r"grid: .*not UTF-8 text \(byte 0xff on line 2\)"):
        load_grid(path)
    with pytest.raises(UserError, match="grid: .*no such file"):
        load_grid(tmp_path / "none.yaml")


@pytest.mark.parametrize(("n", "seed", "needle"), [(-1, 0, "search: -1 must be in 0..500"),
                                                   (501, 0, "search: 501"), (1, -1, "search_seed: -1")])
def test_check_bounds(n: int, seed: int, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        check(n, seed)


def _row(policy: str, scenario: str, gpu_h: float, worst: float, met: bool) -> dict:
    return {"policy": policy, "scenario": scenario, "gpu_hours_mean": gpu_h, "attainment_min": worst,
            "target": {"met": met}}


def test_ranking_puts_the_target_first_then_the_cheapest() -> None:
    rows = [_row("ref", "a", 10.0, 0.96, True), _row("ref", "b", 20.0, 0.97, True),
            _row("cheap-miss", "a", 8.0, 0.93, False), _row("cheap-miss", "b", 16.0, 0.96, True),
            _row("dear", "a", 11.0, 0.97, True), _row("dear", "b", 22.0, 0.98, True),
            _row("cheap", "a", 9.5, 0.955, True), _row("cheap", "b", 20.0, 0.96, True)]
    ranked = ranking(rows, "ref")
    assert [e["policy"] for e in ranked] == ["cheap", "ref", "dear", "cheap-miss"]
    assert ranked[0]["gpu_hours_ratio"] == {"a": 0.95, "b": 1.0} and ranked[0]["gpu_hours_ratio_mean"] == 0.975
    assert ranked[1]["reference"] and not ranked[0]["reference"]
    assert ranked[3]["worst_seed"] == 0.93 and not ranked[3]["seeds_target_met"]


@pytest.mark.slow
def test_bench_seeds_search_replays_the_drawn_variants_and_ranks_them(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.json"
    rc = run(["bench", "seeds", "--seeds", "1", "--scenarios", "azure-conv", "--search", "2", "--search-seed", "3",
              "--workers", "2", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "Search: 3 policies" in text
    doc = json.loads(out.read_text())
    drawn = draw(load_grid(REPO / "policies" / "search" / "knobs.yaml"), 2, 3, _loads)
    assert {r["policy"] for r in doc["runs"]} == {"policies/example.yaml",
                                                  *(f"policies/example.yaml [{t.replace(';', '; ')}]" for t in drawn)}
    assert doc["search"]["n"] == 2 and doc["search"]["seed"] == 3 and len(doc["search"]["ranking"]) == 3
    assert "--search 2 --search-seed 3" in doc["command"]
    ref = next(e for e in doc["search"]["ranking"] if e["reference"])
    assert ref["gpu_hours_ratio_mean"] == 1.0
