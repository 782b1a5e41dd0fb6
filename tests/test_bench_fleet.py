"""`planner bench fleet`: eight models from the shipped traces on one budget, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.bench.fleet import BUSY_S, MODELS, PERIOD_S, QUICK_PERIOD_S, bench_fleet, model_trace
from planner.bench.scenarios import default_traces_dir
from planner.cli import run


def _traces() -> Path:
    folder = default_traces_dir()
    if folder is None:
        pytest.skip("no shared traces folder")
    return folder


def test_the_models_are_built_from_the_shipped_traces() -> None:
    fleet, traces = bench_fleet(quick=True, traces_dir=_traces())
    assert len(fleet.members) >= 8 and set(traces) == set(fleet.names())
    assert {m.priority for m in fleet.members} == {10, 5, 0}
    sparse = [m for m in MODELS if m.busy_phase is not None]
    assert len(sparse) >= 4
    for m in sparse:  # idle for long stretches: no arrival outside its busy windows
        t = traces[m.name].arrival_s
        assert len(t) > 0 and ((t - m.busy_phase * 600.0) % 600.0 < 160.0).all()


def test_the_burst_multiplies_the_rate_inside_its_window_only() -> None:
    m = next(m for m in MODELS if m.burst)
    t = model_trace(m, _traces(), 3600.0, 0).arrival_s
    inside = np.count_nonzero((t >= 0.55 * 3600) & (t < 0.55 * 3600 + 600)) / 600
    before = np.count_nonzero((t >= 0.55 * 3600 - 600) & (t < 0.55 * 3600)) / 600
    assert inside > 2.5 * before


def test_a_full_sparse_model_is_busy_8_minutes_in_30() -> None:
    m = next(m for m in MODELS if m.busy_phase is not None)
    t = model_trace(m, _traces(), 3600.0, 0).arrival_s
    assert t.max() - t.min() > PERIOD_S and ((t - m.busy_phase * PERIOD_S) % PERIOD_S < 480.0).all()


@pytest.mark.parametrize("quick", [True, False])
def test_a_sparse_model_falls_asleep_within_its_idle_stretch(quick: bool) -> None:
    """The idle window (scale_to_zero_after_s) plus a tick is shorter than the idle stretch between two busy
    windows, in the quick run as in the full one: otherwise the sparse models never give their GPUs back."""
    fleet, _ = bench_fleet(quick=quick, traces_dir=_traces())
    period = QUICK_PERIOD_S if quick else PERIOD_S
    idle_s = period * (1 - BUSY_S / PERIOD_S)
    for m in (m for m in MODELS if m.busy_phase is not None):
        policy = fleet.member(m.name).policy
        assert policy.scales_to_zero() and policy.scale_to_zero_after_s + policy.interval_s < idle_s


def test_the_default_budget_binds_above_the_floors_either_way() -> None:
    """Sleeping sparse models free their floors, so the budget that binds during the burst is smaller; held
    (--no-zero), their floors need a larger one or they would clamp the priority-10 models."""
    asleep, _ = bench_fleet(quick=True, traces_dir=_traces())
    awake, _ = bench_fleet(quick=True, traces_dir=_traces(), zero=False)
    floors = [sum(m.floor_gpus for m in f.members) for f in (asleep, awake)]
    assert floors[0] < asleep.max_gpus < awake.max_gpus and floors[1] < awake.max_gpus


def test_a_budget_below_the_floors_is_refused(capsys) -> None:  # noqa: ANN001
    rc = run(["bench", "fleet", "--quick", "--budget-gpus", "10"])
    assert rc == 2 and "--budget-gpus: 10 is below the models' floors" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_fleet_quick_reports_the_fleet(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    _traces()
    rc = run(["bench", "fleet", "--quick", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    f, comp = report["fleet"], report["comparisons"]
    out = capsys.readouterr().out
    assert rc == 0 and "# Fleet backtest" in out
    if f["max_gpus_serving"] < f["max_gpus_used"]:  # above the budget only while draining: said so
        assert f"peak {f['max_gpus_used']:g} used ({f['max_gpus_serving']:g} not draining)" in " ".join(out.split())
    assert len(report["policies"]) >= 8
    assert f["max_gpus_granted"] <= f["budget_gpus"] < comp["unshared"]["max_gpus_used"]  # the budget binds
    assert f["binding_ticks"] > 0 and f["gpu_hours"] < comp["static_peak"]["gpu_hours"]
    top = [p for p in report["policies"].values() if p["priority"] == 10]
    # The high priorities keep their SLA sizes but for the smallest wake of a sleeping model with held requests
    # (fleet_wake): never a GPU to a lower priority's growth.
    assert all(set(p["clamped_by"]) <= {"fleet_wake"} for p in top)
    for p in report["policies"].values():
        assert sum(p["clamped_by"].values()) == p["clamped_ticks"]
    assert set(f) >= {"budget_gpus", "max_gpus_used", "gpu_hours", "cold_starts"}
    # Billed GPUs pass the budget only by replicas still draining whose GPUs a tick granted again.
    assert 0 < f["max_gpus_serving"] <= f["budget_gpus"] and f["max_gpus_serving"] <= f["max_gpus_used"]
    assert f["gpu_hours"] > 0
    for name, p in report["policies"].items():  # per policy: its scores against its SLA, its GPUs, its wakes
        assert {"attainment_joint", "gpu_hours", "sla_met", "failed_requests", "clamped_ticks"} <= set(p), name
        # No request fails: held at the router, a sleeping model wakes ahead of the priorities (before that rule
        # the quick run's sparse-c, priority 0, stayed at zero behind the others and 611 held requests timed out).
        assert p["failed_requests"] == p["cold_starts"]["failed"] == 0, name
    assert report["checks"]["failed_requests"] == sum(p["failed_requests"] for p in report["policies"].values())
    sparse = [m.name for m in MODELS if m.busy_phase is not None]
    assert all(report["policies"][n]["cold_starts"]["wakes"] >= 1 for n in sparse)  # they sleep, and wake
    for name, p in report["policies"].items():  # where the GPU-hours go: per pool, and asleep
        assert set(p["mean_gpus"]) == {"prefill", "decode"} and (p["asleep_share"] > 0) == (name in sparse), name
    assert f["cold_starts"] >= len(sparse)
    # The oracle static: per model no dearer than its peak pool, and meeting its SLA wherever the peak did.
    least, peak = comp["static_min"]["policies"], comp["static_peak"]["policies"]
    assert comp["static_min"]["gpu_hours"] < comp["static_peak"]["gpu_hours"]  # the search found a cheaper pool
    for name in least:
        assert least[name]["gpu_hours"] <= peak[name]["gpu_hours"] + 1e-9, name
        assert least[name]["sla_met"] or not peak[name]["sla_met"], name
        assert sum(least[name]["peak_replicas"].values()) <= sum(peak[name]["peak_replicas"].values()), name
    assert report["checks"]["gpu_hours_vs_static_min"] == pytest.approx(
        f["gpu_hours"] / comp["static_min"]["gpu_hours"], rel=1e-3)
    assert "Targets: high-priority SLAs met while the budget binds: " in " ".join(out.split())
