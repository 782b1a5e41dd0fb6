"""`planner bench fleet`: eight models from the shipped traces on one budget, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.bench.fleet import (
    BURST,
    BURST_S,
    BUSY_S,
    CODE,
    CONV,
    MODELS,
    PERIOD_S,
    QUICK_PERIOD_S,
    bench_fleet,
    day_length,
    day_shape,
    day_trace,
    fleet_warmup,
    model_trace,
)
from planner.bench.scenarios import default_traces_dir
from planner.cli import run
from planner.errors import UserError
from planner.sim.evaluate.fleet_plot import static_gpus


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
    # --alone replays one model's planner as the fleet's unshared comparison does: the same figures.
    alone_dir = tmp_path / "alone"
    rc = run(["bench", "fleet", "--quick", "--alone", "code-large", "--seeds", "2", "--workers", "2",
              "--out", str(alone_dir)])
    alone = json.loads((alone_dir / "alone.json").read_text())
    unshared = comp["unshared"]["policies"]["code-large"]
    assert rc == 0 and [r["seed"] for r in alone["runs"]] == [0, 1]
    assert alone["runs"][0]["attainment_joint"] == pytest.approx(unshared["attainment_joint"], abs=1e-5)
    assert alone["runs"][0]["gpu_hours"] == pytest.approx(unshared["gpu_hours"], abs=2e-3)
    assert alone["runs"][0]["met"] == unshared["sla_met"]
    assert alone["summary"]["below"] == sum(not r["met"] for r in alone["runs"])
    assert alone["summary"]["worst"] == min(r["attainment_joint"] for r in alone["runs"])
    assert "code-large alone" in capsys.readouterr().out
    # --vary sets fields on that model's policy (its fleet settings kept): no recovery hold moves the replay.
    rc = run(["bench", "fleet", "--quick", "--alone", "code-large", "--vary", "sla.recover_hold_s=0;sla.recover_below=0",
              "--workers", "1", "--out", str(alone_dir)])
    varied = json.loads((alone_dir / "alone.json").read_text())
    assert rc == 0 and "--vary 'sla.recover_hold_s=0;sla.recover_below=0'" in varied["command"]
    assert varied["runs"][0]["window_s"] == alone["runs"][0]["window_s"]
    # The quick hour spends code-large's budget, so the recovery's hold is in play: without it the pool gives
    # capacity back in the lulls (fewer GPU-hours) and misses more.
    assert varied["runs"][0]["gpu_hours"] < alone["runs"][0]["gpu_hours"]
    assert varied["runs"][0]["attainment_joint"] < alone["runs"][0]["attainment_joint"]


# ------------------------------------------------------------------------------------------- the whole day
def test_a_day_follows_servegens_day_with_its_peak_at_the_hours_rate() -> None:
    """`--day`: each model's arrivals follow ServeGen's day 2 played 8x faster (the rate per simulated window
    tracks the day's, the busiest window at the hour's rate), and keep the Azure trace's lengths."""
    folder = _traces()
    m = next(m for m in MODELS if m.name == "conv-large")
    length, warm = day_length(False, 8.0), fleet_warmup(False)
    assert length == warm + 86400.0 / 8 == 600.0 + 10800.0
    t = day_trace(m, folder, length, warm, 0, compress=8.0)
    starts, share = day_shape(folder, length, warm, 8.0)
    assert share.max() == 1.0 and 0.1 < share.min() < 0.3  # the day's trough is a fifth of its peak
    assert np.allclose(np.diff(starts), 75.0)  # a 10-minute window lasts 75 s
    hour = model_trace(m, folder, 3600.0, 0)
    hour_rps = len(hour.window(600.0, 3400.0)) / 2800.0
    # Per simulated hour-long stretch the rate is the hour's rate times the day's mean share over it.
    for lo in (600.0, 4200.0, 7800.0):
        w = (starts >= lo) & (starts < lo + 3600.0)
        want = hour_rps * float(share[w].mean())
        assert len(t.window(lo, lo + 3600.0)) / 3600.0 == pytest.approx(want, rel=0.12), lo
    # Its lengths are Azure conversation's (not the ServeGen format's synthetic ones).
    assert np.median(t.isl) == pytest.approx(np.median(hour.isl), rel=0.1)
    assert t.arrival_s.min() >= 0 and t.arrival_s.max() < length and (np.diff(t.arrival_s) >= 0).all()


def test_a_day_keeps_the_sparse_windows_and_the_burst() -> None:
    folder = _traces()
    length, warm = day_length(False, 8.0), fleet_warmup(False)
    sparse = next(m for m in MODELS if m.busy_phase is not None)
    t = day_trace(sparse, folder, length, warm, 0, compress=8.0).arrival_s
    assert t.max() - t.min() > 4 * PERIOD_S and ((t - sparse.busy_phase * PERIOD_S) % PERIOD_S < BUSY_S).all()
    burst = next(m for m in MODELS if m.burst)
    b = day_trace(burst, folder, length, warm, 0, compress=8.0).arrival_s
    start = BURST[0] * length
    inside = np.count_nonzero((b >= start) & (b < start + BURST_S)) / BURST_S
    before = np.count_nonzero((b >= start - BURST_S) & (b < start)) / BURST_S
    after = np.count_nonzero((b >= start + BURST_S) & (b < start + 2 * BURST_S)) / BURST_S
    assert inside > 2.5 * before and inside > 2.5 * after


def test_the_real_day_plays_servegens_windows_at_their_own_length() -> None:
    """``--compress 1``: a 10-minute window lasts 10 minutes, the day 24 hours, at the same per-second rates."""
    folder = _traces()
    length = day_length(False, 1.0)
    assert length == 600.0 + 86400.0
    starts, share = day_shape(folder, length, 600.0, 1.0)
    fast_starts, fast_share = day_shape(folder, day_length(False, 8.0), 600.0, 8.0)
    assert np.allclose(np.diff(starts), 600.0) and len(starts) == 1 + 144  # a warm-up window, then day 2's 144
    assert np.allclose(share[-144:], fast_share[-144:]) and np.allclose(starts[-144:] - 600.0, 8.0 * (fast_starts[-144:] - 600.0))
    m = next(m for m in MODELS if m.name == "conv-large")
    t = day_trace(m, folder, length, 600.0, 0, compress=1.0)
    fast = day_trace(m, folder, day_length(False, 8.0), 600.0, 0, compress=8.0)
    assert t.arrival_s.max() > 0.95 * length and len(t) > 7 * len(fast)


@pytest.mark.parametrize("args, said", [
    (["--alone", "nope"], "--alone: 'nope' is not a model of the fleet; one of conv-large, code-large"),
    (["--seeds", "3"], "--seeds/--workers/--vary: only with --alone MODEL"),
    (["--workers", "2"], "--seeds/--workers/--vary: only with --alone MODEL"),
    (["--alone", "code-large", "--seeds", "0"], "--seeds"),
    (["--vary", "sla.recover_hold_s=0"], "--seeds/--workers/--vary: only with --alone MODEL"),
    (["--alone", "code-large", "--vary", "sla.recover_hold_s=-1"], "--vary: "),
    (["--alone", "code-large", "--vary", "sla.nope=1"], "--vary: "),
    (["--policy", "/nope/policy.yaml"], "/nope/policy.yaml: policy file not found"),
    (["--alone", "code-large", "--policy", "/nope/policy.yaml"], "/nope/policy.yaml: policy file not found"),
])
def test_alone_is_refused_with_one_line(args: list[str], said: str, capsys) -> None:  # noqa: ANN001
    rc = run(["bench", "fleet", "--quick", *args])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and "Traceback" not in err


def test_compress_is_for_the_day_only(capsys) -> None:  # noqa: ANN001
    rc = run(["bench", "fleet", "--quick", "--compress", "2"])
    assert rc == 2 and "--compress: only with --day" in capsys.readouterr().err
    rc = run(["bench", "fleet", "--quick", "--day", "--compress", "0.5"])
    assert rc == 2 and "--compress" in capsys.readouterr().err


def test_a_day_fleet_is_the_same_fleet() -> None:
    hour, _ = bench_fleet(quick=True, traces_dir=_traces())
    day, traces = bench_fleet(quick=True, traces_dir=_traces(), day=True)
    assert hour.names() == day.names() and hour.max_gpus == day.max_gpus
    assert all(t.arrival_s.max() < day_length(True) for t in traces.values())
    # The percentile is promised over the day as the day is scored; over the hour, the example's hour.
    assert {m.policy.sla.window_s for m in day.members} == {day_length(True) - fleet_warmup(True)}
    whole, _ = bench_fleet(traces_dir=_traces(), day=True, compress=8.0)
    assert {m.policy.sla.window_s for m in whole.members} == {86400.0 / 8}
    assert {m.policy.sla.window_s for m in hour.members} == {3600.0}


def test_a_day_without_servegens_rates_is_refused(tmp_path: Path) -> None:
    (tmp_path / "azure2023").mkdir()
    for f in (CONV, CODE):
        (tmp_path / f).write_bytes((_traces() / f).read_bytes())
    bench_fleet(quick=True, traces_dir=tmp_path)  # the hour needs only Azure's
    with pytest.raises(UserError, match="servegen/aggregate_rate_language_m-large.csv"):
        bench_fleet(quick=True, traces_dir=tmp_path, day=True)


@pytest.mark.slow
def test_bench_fleet_quick_day_reports_the_day(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    _traces()
    rc = run(["bench", "fleet", "--quick", "--day", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    assert rc == 0 and report["command"].endswith("--day")
    assert report["day"] == {"trace": "servegen/aggregate_rate_language_m-large.csv", "compress": 1.0,
                             "scored_s": 1200.0}
    assert report["checks"]["failed_requests"] == 0 and len(report["policies"]) == len(MODELS)
    assert report["fleet"]["gpu_hours"] < report["comparisons"]["static_peak"]["gpu_hours"]
    out = capsys.readouterr().out
    # (a narrow terminal wraps a long path anywhere: compared with every blank removed)
    assert "# Fleet backtest" in out and f"wrote{tmp_path / 'fleet.png'}" in "".join(out.split())
    assert (tmp_path / "fleet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The plot's static line: every model's peak pool held together, the static run's own peak.
    fleet, _ = bench_fleet(quick=True, traces_dir=_traces(), day=True)
    assert static_gpus(fleet, report) == report["comparisons"]["static_peak"]["max_gpus_used"]
    rc = run(["bench", "fleet", "--quick", "--day", "--no-plots", "--out", str(tmp_path / "bare")])
    assert rc == 0 and not (tmp_path / "bare" / "fleet.png").exists()
