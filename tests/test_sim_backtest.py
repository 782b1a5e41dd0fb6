"""Backtest harness: report contract with its references, baselines, CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import run
from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.evaluate.backtest import direction_changes, run_backtest
from planner.sim.evaluate.baselines import ReactiveController, StaticController
from planner.sim.traces.synthetic import sinusoid
from planner.types import Observation, PoolObservation

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles/h200/qwen3-32b.json"
POLICY_KEYS = {"requests", "attainment_ttft", "attainment_itl", "attainment_joint", "ttft_ms", "itl_ms", "gpu_hours",
               "scale_events", "direction_changes_per_hour", "failed_requests"}


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load((REPO / "policies/example.yaml").read_text())
    data["profile"] = str(PROFILE)
    data["startup_s"] = 60
    p = tmp_path_factory.mktemp("pol") / "policy.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tr = sinusoid(25.0, 15.0, 400.0, 600.0, isl=1000, osl=150, seed=5)
    p = tmp_path_factory.mktemp("tr") / "trace.csv"
    lines = ["t,isl,osl"] + [f"{t:.4f},{i},{o}" for t, i, o in zip(tr.arrival_s, tr.isl, tr.osl, strict=True)]
    p.write_text("\n".join(lines) + "\n")
    return p


def test_cli_backtest_writes_the_report_contract(tmp_path: Path, policy_file: Path, trace_file: Path) -> None:
    out = tmp_path / "out"
    rc = run(["backtest", "--trace", str(trace_file), "--format", "csv", "--columns", "arrival=t,isl=isl,osl=osl",
              "--profile", str(PROFILE), "--policy", str(policy_file), "--out", str(out), "--workers", "1"])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["policies"]) == {"planner", "static", "reactive", "dynamo-throughput", "dynamo-load",
                                       "planner+perfect-forecast"}
    for name, p in report["policies"].items():
        assert POLICY_KEYS <= set(p), name
        assert p["requests"] == report["trace"]["requests"]
        assert 0 <= p["attainment_joint"] <= min(p["attainment_ttft"], p["attainment_itl"]) + 1e-12
        assert p["gpu_hours"] > 0
    for png in ("load.png", "replicas.png", "latency.png"):
        assert (out / png).stat().st_size > 1000
    assert "| offline schedule (reference) |" in (out / "report.md").read_text()
    header = (out / "timeline.csv").read_text().splitlines()[0].split(",")
    assert {"policy", "t_s", "prefill.ready", "decode.starting", "decode.kv_usage", "gpus", "prefill.predicted_ms",
            "decode.predicted_ms", "ttft_ms_at_sla", "itl_ms_at_sla", "first_tokens"} <= set(header)
    # The planner predicts latency for its sizes, so its bias is reported; a static pool predicts nothing.
    bias = report["policies"]["planner"]["model_bias"]
    assert set(bias) == {"ttft", "itl"} and all(b["intervals"] > 0 and b["p10"] <= b["median"] <= b["p90"]
                                               for b in bias.values())
    assert "model_bias" not in report["policies"]["static"]
    # The planner spends an error budget (the example's sla.budget_control), so its postures are reported: every
    # tick carries one posture's reason (the first holds for want of data); a static pool has no budget.
    shares = report["policies"]["planner"]["postures"]
    assert set(shares) == {"lean", "burning", "recovering", "unmeasured", "held"}
    assert sum(v["share"] for v in shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert all((v["mean_gpus"] is None) == (v["share"] == 0) for v in shares.values())
    assert "postures" not in report["policies"]["static"]
    assert "Error-budget postures" in (out / "report.md").read_text()
    assert (out / "calibration.png").stat().st_size > 1000
    ref = report["references"]
    offline, bound = ref["offline"], ref["lower_bound"]
    assert POLICY_KEYS <= set(offline)
    # the offline schedule meets the SLA percentile it was searched for, costs no more than any policy that
    # does (it started from each of them), and static (its peak held all along) costs at least as much
    assert offline["attainment_joint"] >= report["sla"]["percentile"] / 100
    feasible = [p for p in report["policies"].values() if p["attainment_joint"] >= offline["attainment_joint"]]
    assert all(p["gpu_hours"] >= offline["gpu_hours"] for p in feasible)
    assert report["checks"] == {"lower_bound_le_offline": True, "policies_dominating_offline": []}
    assert 0 < bound["gpu_hours"] <= offline["gpu_hours"]
    assert report["policies"]["static"]["gpu_hours"] >= offline["gpu_hours"]
    assert "one continuous simulation of the whole replay" in offline["method"] and bound["method"]


def test_kill_mode_and_seed_are_recorded(tmp_path: Path, policy_file: Path, trace_file: Path) -> None:
    res = run_backtest(_load(trace_file), load_profile(PROFILE), load_policy(policy_file), baselines=["reactive"],
                       kill=True, seed=3, offline_simulations=2)  # the search is not under test here
    assert res.report["sim"]["kill"] is True and res.report["sim"]["seed"] == 3
    assert set(res.report["policies"]) == {"planner", "reactive"}


def test_every_progress_bar_ends_full(policy_file: Path) -> None:
    """The offline schedule's search ends when nothing is left to cut, under its budget of simulations; its bar
    (sized by the budget) then stood at 40-65 % in `planner demo` and `planner backtest`."""
    calls: list[tuple[str, float, float]] = []
    short = sinusoid(25.0, 15.0, 400.0, 200.0, isl=1000, osl=150, seed=5)  # few cells: little left to cut
    run_backtest(short, load_profile(PROFILE), load_policy(policy_file), baselines=["static"],
                 offline_simulations=24, progress=lambda name, done, total: calls.append((name, done, total)))
    last = {name: (done, total) for name, done, total in calls}
    assert {"planner", "static", "offline schedule"} <= set(last)
    assert all(done == total for done, total in last.values()), last
    searched = [done for name, done, total in calls if name == "offline schedule"][:-1]
    assert searched and max(searched) < last["offline schedule"][1]  # the case: a search under its budget


def _load(path: Path):  # noqa: ANN202
    from planner.sim.traces.loaders import load_requests

    return load_requests(path, "csv", columns={"arrival": "t", "isl": "isl", "osl": "osl"})


@pytest.mark.parametrize("argv_extra,needle", [
    (["--format", "parquet"], "not a known trace format"),
    (["--baselines", "static,magic"], "unknown magic"),
    (["--rate-scale", "-1"], "rate-scale"),
], ids=["format", "baseline", "rate-scale"])
def test_cli_bad_input_exits_2(tmp_path: Path, policy_file: Path, trace_file: Path, capsys: pytest.CaptureFixture,
                               argv_extra: list[str], needle: str) -> None:
    argv = ["backtest", "--trace", str(trace_file), "--format", "csv", "--columns", "arrival=t,isl=isl,osl=osl",
            "--profile", str(PROFILE), "--policy", str(policy_file), "--out", str(tmp_path)]
    rc = run(argv + argv_extra)
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_request_longer_than_the_context_is_a_clear_error(tmp_path: Path, policy_file: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    p = tmp_path / "long.csv"
    p.write_text("t,isl,osl\n0,100,10\n1,50000,10\n")
    rc = run(["backtest", "--trace", str(p), "--format", "csv", "--columns", "arrival=t,isl=isl,osl=osl",
              "--profile", str(PROFILE), "--policy", str(policy_file), "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "request #1" in err and "50000" in err


# ------------------------------------------------------------------------------------------ baselines
def _obs(rate: float, isl: float = 1000, osl: float = 200, ttft: float = 300, itl: float = 20, queue: float = 0,
         kv: float = 0.3, ready: int = 2, running: float = 100) -> Observation:
    po = PoolObservation(requests=rate * 60, rate_rps=rate, isl_mean=isl, osl_mean=osl, ttft_ms_mean=ttft,
                         ttft_ms_p95=ttft, itl_ms_mean=itl, itl_ms_p95=itl, queue=queue, running=running, kv_usage=kv,
                         ready_replicas=ready)
    return Observation(at_s=0.0, window_s=60.0, pools={"prefill": po, "decode": po})


@pytest.fixture(scope="module")
def pol(policy_file: Path):  # noqa: ANN201
    return load_policy(policy_file)


def test_reactive_hpa_tolerance_and_stabilisation(pol) -> None:  # noqa: ANN001
    prof = load_profile(PROFILE)
    ctl = ReactiveController(pol, prof, {"prefill": 4, "decode": 4})
    # within 10 % of the target: no change
    assert ctl.tick(_obs(10, queue=2 * 4 * 1.05, kv=0.1, ready=4, running=2), 15.0).targets() == {"prefill": 4,
                                                                                                 "decode": 4}
    up = ctl.tick(_obs(10, queue=2 * 4 * 2, kv=0.1, ready=4, running=2), 30.0).targets()
    assert up["prefill"] == 8
    # low load right after: held by the 300 s scale-down stabilisation window
    assert ctl.tick(_obs(10, queue=0, kv=0.0, ready=8, running=0), 45.0).targets()["prefill"] == 8
    assert ctl.tick(_obs(10, queue=0, kv=0.0, ready=8, running=0), 400.0).targets()["prefill"] == \
        pol.pools.prefill.min_replicas
    # a busy decode pool (running sequences per replica above the batch target) scales up proportionally
    fresh = ReactiveController(pol, prof, {"prefill": 4, "decode": 4})
    busy = fresh.tick(_obs(10, queue=0, kv=0.1, ready=4, running=4 * 2 * fresh.decode_running_target), 15.0)
    assert busy.targets()["decode"] == 8


def test_static_never_moves(pol) -> None:  # noqa: ANN001
    ctl = StaticController(pol, load_profile(PROFILE), {"prefill": 3, "decode": 2})
    assert ctl.tick(_obs(100), 30.0).targets() == {"prefill": 3, "decode": 2}


@pytest.mark.parametrize("series,expected", [
    ([1, 2, 3, 4], 0), ([1, 2, 1, 2], 2), ([3, 3, 2, 2, 4], 1), ([2], 0),
], ids=["monotone", "flapping", "one-reversal", "single"])
def test_direction_changes(series: list[int], expected: int) -> None:
    assert direction_changes([(float(i), {"decode": n}) for i, n in enumerate(series)]) == expected


def test_direction_changes_counts_pools_missing_from_the_first_tick() -> None:
    from planner.sim.evaluate.backtest import direction_changes

    # the first decision held with no data (no pools); the flips after it must still count
    targets = [(0.0, {}), (30.0, {"prefill": 2}), (60.0, {"prefill": 4}), (90.0, {"prefill": 3}),
               (120.0, {"prefill": 5})]
    assert direction_changes(targets) == 2
