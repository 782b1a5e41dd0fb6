"""compare_profiles: the analytical model's error on a measured profile (no torch needed)."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_hardware, load_model
from planner.perf.model import ModelSpec
from planner.profile import Profile, load_profile
from planner.profiler.accuracy import score_measurements
from planner.profiler.analytical import profile_analytical
from planner.profiler.compare import compare_profiles, spec_of, to_measurement_format
from planner.profiler.grids import SweepRequest

REQ = SweepRequest(model="qwen3-8b", gpu="h200", tp=(1, 2), isl=4000, osl=500, ttft_ms=500, itl_ms=30,
                   isl_grid=(128, 1024, 8192), batch_grid=(1, 64), context_grid=(2048, 8192))


def _scaled(profile: Profile, factor: float) -> Profile:
    """The same profile with every time multiplied by ``factor`` (a 'measurement' the model misses)."""
    data = json.loads(profile.to_json())
    for sweep in data["prefill"]:
        for p in sweep["points"]:
            p["ttft_ms"] *= factor
    for sweep in data["decode"]:
        for p in sweep["points"]:
            p["itl_ms"] *= factor
    return Profile.model_validate(data)


@pytest.fixture(scope="module")
def analytical() -> Profile:
    return profile_analytical(load_model("qwen3-8b"), load_hardware("h200"), REQ)


CASES = [(1.0, 0.0), (1.25, 1 / 1.25 - 1), (0.8, 1 / 0.8 - 1)]


@pytest.mark.parametrize(("factor", "signed"), CASES, ids=["exact", "measured-slower", "measured-faster"])
def test_error_is_modelled_over_measured(analytical, factor: float, signed: float) -> None:
    table = compare_profiles(_scaled(analytical, factor))
    for row in table.rows:
        if row.stage == "kv_capacity":
            assert row.median_abs == pytest.approx(0.0, abs=1e-6)  # capacity is not scaled
            continue
        assert row.median_signed == pytest.approx(signed, abs=1e-3), row
        assert row.worst_abs == pytest.approx(abs(signed), abs=1e-3), row


def test_rows_cover_each_tp_and_stage_and_drop_launch_bound_prefills(analytical) -> None:
    table = compare_profiles(analytical)
    assert {(r.tp, r.stage) for r in table.rows} == {(t, s) for t in (1, 2) for s in ("prefill", "decode",
                                                                                        "kv_capacity")}
    pre = table.row("prefill", 1)
    assert pre.points + pre.excluded == 3 and pre.excluded >= 1  # ISL 128 runs under 20 ms
    md = table.markdown()
    assert md.splitlines()[0].startswith("| model | TP | stage |") and len(md.splitlines()) == 2 + len(table.rows)


def test_spec_of_round_trips_the_roofline_inputs(analytical) -> None:
    spec, hw = spec_of(analytical)
    ref = load_model("qwen3-8b")
    assert (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.intermediate, spec.vocab) == (
        ref.layers, ref.hidden, ref.heads, ref.kv_heads, ref.intermediate, ref.vocab)
    assert hw.hbm_bytes_per_s == load_hardware("h200").hbm_bytes_per_s


def test_measurement_format_scores_like_shared_measurements(tmp_path) -> None:
    # No LM head (vocab 0): the shapes of profiles/measurements, whose scorer must then find zero error.
    full = load_model("qwen3-8b")
    bare = ModelSpec(name="qwen3-8b", layers=full.layers, hidden=full.hidden, heads=full.heads,
                     kv_heads=full.kv_heads, head_dim=full.head_dim, intermediate=full.intermediate, vocab=0)
    p = profile_analytical(bare, load_hardware("h200"), REQ)
    path = tmp_path / "m.json"
    data = to_measurement_format(p, bare)
    data["gpu"] = "NVIDIA H200"
    path.write_text(json.dumps(data))
    score = score_measurements(path)
    assert max(score["decode"]) < 1e-3 and max(score["prefill"]) < 1e-3


SHIPPED = ["qwen3-8b", "qwen3-32b"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_h200_torch_profiles_stay_within_the_accuracy_bar(repo, name: str) -> None:
    """Real H200 measurements (torch backend, TP 1): the calibrated model's median error stays under 15 %."""
    p = load_profile(repo / "profiles" / "h200" / f"{name}-torch.json")
    assert p.provenance.backend == "torch"
    sw = p.provenance.software
    assert sw["gpu"] == "NVIDIA H200" and {"driver", "cuda", "torch"} <= set(sw)
    table = compare_profiles(p)
    for stage in ("prefill", "decode"):
        assert table.row(stage).median_abs < 0.15, table.markdown()


MULTI_GPU = [("qwen3-32b-torch-tp12", (1, 2), "2"), ("llama-3.1-70b-torch-tp2", (2,), "2"),
             ("qwen3-32b-torch-tp4", (4,), "4"), ("llama-3.1-70b-torch-tp4", (4,), "4")]


@pytest.mark.parametrize("name,tps,gpus", MULTI_GPU, ids=[m[0] for m in MULTI_GPU])
def test_shipped_multi_gpu_profiles_stay_within_the_accuracy_bar(repo, name: str, tps: tuple[int, ...],
                                                                 gpus: str) -> None:
    """Real 2- and 4-GPU H200 measurements with NCCL all-reduces: the model's TP scaling stays under 15 % median."""
    p = load_profile(repo / "profiles" / "h200" / f"{name}.json")
    assert p.provenance.backend == "torch" and p.provenance.software["gpus_visible"] == gpus
    assert "nccl" in p.provenance.software
    table = compare_profiles(p)
    for tp in tps:
        for stage in ("prefill", "decode"):
            assert table.row(stage, tp).median_abs < 0.15, table.markdown()
