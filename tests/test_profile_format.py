"""The profile format contract: round trip, strict validation, one-line errors."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import UserError
from planner.profile import SCHEMA, load_profile, parse_profile, save_profile
from planner.profiler.analytical import profile_analytical
from planner.profiler.grids import SweepRequest


@pytest.fixture(scope="module")
def profile():
    req = SweepRequest("qwen3-8b", "h200", (1, 2), 2000, 300, 500, 30, isl_grid=(256, 1024, 4096),
                       batch_grid=(1, 8, 64), context_grid=(1024, 4096))
    return profile_analytical(load_model("qwen3-8b"), load_hardware("h200"), req)


def test_round_trip(tmp_path, profile) -> None:
    path = tmp_path / "p.json"
    save_profile(profile, path)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA
    assert data["provenance"]["backend"] == "analytical"
    assert load_profile(path) == profile


def test_contract_fields_present(profile) -> None:
    data = json.loads(profile.to_json())
    assert set(data) >= {"schema", "model", "hardware", "provenance", "prefill", "decode", "selection"}
    assert {"isl", "ttft_ms", "tokens_per_s_per_gpu"} <= set(data["prefill"][0]["points"][0])
    assert {"batch", "context_tokens", "itl_ms", "tokens_per_s_per_gpu"} <= set(data["decode"][0]["points"][0])
    assert {"tp", "gpus", "kv_capacity_tokens", "max_batch", "points"} <= set(data["decode"][0])
    assert data["model"]["kv_bytes_per_token"] == 147_456


def test_shipped_profiles_load(repo) -> None:
    paths = sorted((repo / "profiles" / "h200").glob("*.json"))
    assert paths
    for path in paths:
        p = load_profile(path)
        assert p.selection is not None


def _mutate(data: dict, path: list, value) -> dict:
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


BAD = [
    (["schema"], "planner.profile/v0", "schema"),
    (["prefill", 0, "points", 0, "ttft_ms"], -1.0, "prefill.0.points.0.ttft_ms"),
    (["decode", 0, "tp"], 0, "decode.0.tp"),
    (["model", "surprise"], 1, "model.surprise"),
    (["provenance", "backend"], "magic", "provenance.backend"),
]


@pytest.mark.parametrize(("path", "value", "named"), BAD, ids=["schema", "neg-ttft", "tp0", "extra", "backend"])
def test_bad_profile_error_names_field(profile, path, value, named) -> None:
    data = _mutate(json.loads(profile.to_json()), path, value)
    with pytest.raises(UserError) as exc:
        parse_profile(data, "p.json")
    msg = str(exc.value)
    assert "p.json" in msg and named in msg and "\n" not in msg


def test_load_profile_file_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_profile(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[1,")
    with pytest.raises(UserError, match="not valid JSON"):
        load_profile(bad)
