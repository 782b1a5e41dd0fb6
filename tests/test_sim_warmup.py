"""Backtest warm-up (unscored lead-in), the perfect-forecast planner, and work-based demand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cli import run
from planner.decide import DeciderSpec, decide
from planner.decide.demand import Demand, demand
from planner.policy_file import parse_policy
from planner.profile import load_profile
from planner.sim.evaluate.backtest import run_backtest
from planner.sim.evaluate.clairvoyant import PerfectForecast
from planner.sim.evaluate.report import render_markdown
from planner.sim.traces.records import RequestTrace
from planner.sim.traces.synthetic import constant, step
from planner.types import Forecast, LoadForecast, Pool
from tests.support.decide_support import example_data, flat, merge, observation

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles/h200/qwen3-32b.json"


@pytest.fixture(scope="module")
def pol():  # noqa: ANN201
    return parse_policy(merge(example_data(), {"profile": str(PROFILE), "startup_s": 60}))


@pytest.fixture(scope="module")
def prof():  # noqa: ANN201
    return load_profile(PROFILE)


def test_warmup_scores_only_what_comes_after_it(pol, prof) -> None:  # noqa: ANN001
    tr = constant(8.0, 600.0, isl=800, osl=100, seed=2)
    warm = 240.0
    res = run_backtest(tr, prof, pol, baselines=["static", "oracle"], warmup_s=warm, workers=1)
    scored = int(np.count_nonzero(tr.arrival_s >= warm))
    assert res.report["trace"]["scored_requests"] == scored < len(tr)
    static = res.report["policies"]["static"]
    assert static["requests"] == scored
    # Static never moves: its GPU-hours are its GPUs times the scored span only (the warm-up is not billed).
    rep = res.replays["static"]
    gpus = sum(n * g for n, g in zip(static["peak_replicas"].values(), (1, 2), strict=True))
    assert rep.gpu_hours == pytest.approx(gpus * (rep.end_s - warm) / 3600.0, rel=1e-9)
    assert static["gpu_hours"] == pytest.approx(rep.gpu_hours, abs=1e-4)
    # Split by pool: each pool's replicas x GPUs over the same scored span, together the whole.
    for pool, tp in zip(static["peak_replicas"], (1, 2), strict=True):
        n = static["peak_replicas"][pool]
        assert static["gpu_hours_by_pool"][pool] == pytest.approx(n * tp * (rep.end_s - warm) / 3600.0, abs=1e-4)
    assert sum(static["gpu_hours_by_pool"].values()) == pytest.approx(static["gpu_hours"], abs=1e-3)
    split = static["gpu_hours_by_pool"]
    total = sum(split.values())
    line = f"- static: prefill {split['prefill']:.2f} ({split['prefill'] / total:.0%}), decode {split['decode']:.2f}"
    assert "GPU-hours by pool (scored window):" in render_markdown(res.report) and line in render_markdown(res.report)
    full = run_backtest(tr, prof, pol, baselines=["static", "oracle"], workers=1)
    assert full.report["policies"]["static"]["gpu_hours"] > static["gpu_hours"]


@pytest.mark.parametrize("warm", [-1.0, 600.0, float("nan")], ids=["negative", "whole-trace", "nan"])
def test_bad_warmup_is_a_clear_error(pol, prof, warm: float) -> None:  # noqa: ANN001
    from planner.errors import UserError

    with pytest.raises(UserError, match="warmup_s"):
        run_backtest(constant(5.0, 600.0, seed=1), prof, pol, baselines=[], warmup_s=warm)


def _backtest_argv(tmp_path: Path, duration_s: float) -> list[str]:
    """`planner backtest` arguments for a constant 5 req/s CSV trace and the example policy (no baselines)."""
    tr = constant(5.0, duration_s, seed=3)
    trace = tmp_path / "t.csv"
    trace.write_text("t,isl,osl\n" + "".join(f"{t:.3f},{i},{o}\n"
                                             for t, i, o in zip(tr.arrival_s, tr.isl, tr.osl, strict=True)))
    pf = tmp_path / "p.yaml"
    pf.write_text(yaml.safe_dump(merge(example_data(), {"profile": str(PROFILE)})))
    return ["backtest", "--trace", str(trace), "--format", "csv", "--columns", "arrival=t,isl=isl,osl=osl",
            "--profile", str(PROFILE), "--policy", str(pf), "--out", str(tmp_path / "o"), "--baselines", ""]


def test_cli_warmup_needs_that_much_trace_before_start(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = _backtest_argv(tmp_path, duration_s=300.0)
    assert run([*argv, "--start-s", "60", "--warmup-s", "120"]) == 2
    assert "--start-s >= 120" in capsys.readouterr().err
    assert run([*argv, "--start-s", "120", "--warmup-s", "120", "--no-plots"]) == 0
    report = yaml.safe_load((tmp_path / "o" / "report.json").read_text())
    assert report["trace"]["warmup_s"] == 120
    assert report["policies"]["planner"]["requests"] == report["trace"]["scored_requests"] < report["trace"]["requests"]


def test_clairvoyant_forecast_reads_the_true_load_ahead(pol, prof) -> None:  # noqa: ANN001
    # Deterministic arrivals: 10 req/s of 500-token prompts until 300 s, then 40 req/s of 2,000-token prompts.
    t = np.concatenate([np.arange(0, 300, 0.1), np.arange(300, 600, 0.025)])
    isl = np.where(t < 300, 500, 2000)
    tr = RequestTrace(t, isl.astype(np.int64), np.full(len(t), 100, dtype=np.int64), "step")
    cv = PerfectForecast(tr, window_s=30.0, interval_s=pol.interval_s, startup_s=pol.startup_s)
    low, _ = cv.forecast([], 200.0)  # horizon 60 + 30 s: windows ending in (200, 290] see only the low load
    high, _ = cv.forecast([], 240.0)  # windows ending in (240, 330] reach the step
    assert low is not None and high is not None
    assert low.rate_rps.mean == pytest.approx(10.0, rel=0.02)
    assert low.prefill_tokens_per_s is not None and low.prefill_tokens_per_s.mean == pytest.approx(5000, rel=0.02)
    assert high.rate_rps.mean == pytest.approx(40.0, rel=0.02)
    assert high.prefill_tokens_per_s is not None and high.prefill_tokens_per_s.at(0.9) == pytest.approx(80000, rel=0.02)


def test_clairvoyant_planner_scales_before_a_step_the_planner_cannot_see(pol, prof) -> None:  # noqa: ANN001
    tr = step(5.0, 30.0, 400.0, 800.0, isl=1000, osl=150, seed=4)
    res = run_backtest(tr, prof, pol, baselines=["clairvoyant"], warmup_s=0.0, offline_simulations=2)  # not under test
    ahead = dict(res.replays["planner+perfect-forecast"].targets)
    blind = dict(res.replays["planner"].targets)
    t_before = max(t for t in ahead if t <= 400.0 - pol.startup_s)  # the last tick a start-up ahead of the step
    assert ahead[t_before]["prefill"] > blind[t_before]["prefill"]
    pc = res.report["policies"]["planner+perfect-forecast"]
    assert pc["attainment_joint"] >= res.report["policies"]["planner"]["attainment_joint"]


def _forecast(rate: float, isl: float, osl: float, work_q: float | None) -> LoadForecast:
    base = (flat(rate), flat(isl), flat(osl))
    if work_q is None:
        return LoadForecast(*base)
    work = Forecast(rate * isl, {q: work_q for q in (0.5, 0.9, 0.95, 0.99)}, 150.0, "test")
    return LoadForecast(*base, prefill_tokens_per_s=work, decode_tokens_per_s=None)


@pytest.mark.parametrize("work_q,expected_rate", [
    (None, 20.0),  # no work forecast: the rate quantile
    (20.0 * 1000 * 1.5, 30.0),  # longer prompts in the surge: the work's quantile at the mean ISL
    (20.0 * 1000 * 0.5, 20.0),  # a work band below the rate quantile never lowers the rate
    (20.0 * 1000 * 9.0, 40.0),  # capped at 2x the work's mean
], ids=["none", "work-above", "work-below", "capped"])
def test_prefill_demand_follows_the_work_quantile(pol, prof, work_q: float | None, expected_rate: float) -> None:  # noqa: ANN001
    spec = DeciderSpec.build(pol, prof, pol.stale_after_s)
    dem = demand(spec, observation(100.0, 20.0, isl=1000, osl=200), _forecast(20.0, 1000, 200, work_q))
    assert isinstance(dem, Demand)
    assert dem.for_pool(Pool.PREFILL).rate_rps == pytest.approx(expected_rate)
    assert dem.for_pool(Pool.DECODE).rate_rps == pytest.approx(20.0)
    d_none, _ = decide(spec, observation(100.0, 20.0, isl=1000, osl=200), _forecast(20.0, 1000, 200, None), None, 100.0)
    d_work, _ = decide(spec, observation(100.0, 20.0, isl=1000, osl=200), _forecast(20.0, 1000, 200, work_q), None, 100.0)
    assert d_work.pools["prefill"].desired_unclamped >= d_none.pools["prefill"].desired_unclamped
    assert (d_work.pools["prefill"].desired_unclamped > d_none.pools["prefill"].desired_unclamped) == (expected_rate > 20.0)


@pytest.mark.parametrize("q,expected", [
    (None, 100.0), (0.5, 110.0), (0.9, 150.0), (0.7, 130.0), (0.925, 160.0), (0.99, 200.0), (0.995, 200.0),
    (0.3, 100.0),
], ids=["mean", "q50", "q90", "between-50-90", "between-90-95", "q99", "above-top", "below-bottom"])
def test_forecast_quantiles_interpolate(q: float | None, expected: float) -> None:
    f = Forecast(100.0, {0.5: 110.0, 0.9: 150.0, 0.95: 170.0, 0.99: 200.0}, 150.0, "test")
    assert f.at(q) == pytest.approx(expected)


def test_cli_quantile_override_is_recorded_and_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [*_backtest_argv(tmp_path, duration_s=240.0), "--no-plots"]
    assert run([*argv, "--quantile", "1.5"]) == 2
    assert "--quantile: 1.5 must be between 0.5 and 0.99" in capsys.readouterr().err
    assert run([*argv, "--quantile", "0.75", "--forecaster", "ewma"]) == 0
    report = yaml.safe_load((tmp_path / "o" / "report.json").read_text())
    assert report["sim"]["forecast"] == {"model": "ewma", "quantile": 0.75}


@pytest.mark.parametrize(("vary", "names"), [
    ("bogus", "--vary: 'bogus' is not KEY=VALUE"),
    ("pools.prefil.max_replicas=3", "unknown key 'pools.prefil'"),
    ("pools.prefill.max_replicas=nope", "pools.prefill.max_replicas"),
], ids=["not-key-value", "unknown-key", "bad-value"])
def test_cli_vary_is_checked_like_a_policy_file(vary: str, names: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    argv = [*_backtest_argv(tmp_path, duration_s=120.0), "--no-plots"]
    assert run([*argv, "--vary", vary]) == 2
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.strip()]) == 1 and names in err, err
    assert not (tmp_path / "o").exists()  # nothing written


def test_cli_vary_sets_the_policy_and_is_recorded(tmp_path: Path) -> None:
    """--vary lifts the prefill pool's floor to 3 replicas (the 5 req/s trace needs 1); the report names the file
    and what was set on it."""
    argv = [*_backtest_argv(tmp_path, duration_s=240.0), "--no-plots"]
    assert run([*argv, "--vary", "pools.prefill.min_replicas=3;forecast.quantile=0.9"]) == 0
    report = yaml.safe_load((tmp_path / "o" / "report.json").read_text())
    assert report["sim"]["policy"].endswith("p.yaml [pools.prefill.min_replicas=3; forecast.quantile=0.9]")
    assert report["sim"]["forecast"]["quantile"] == 0.9
    assert report["policies"]["planner"]["peak_replicas"]["prefill"] == 3
    assert run([*argv, "--out", str(tmp_path / "plain")]) == 0
    plain = yaml.safe_load((tmp_path / "plain" / "report.json").read_text())
    assert plain["sim"]["policy"].endswith("p.yaml") and plain["policies"]["planner"]["peak_replicas"]["prefill"] < 3


def test_static_holds_the_offline_schedules_warm_up_sizes_so_it_enters_the_hour_without_a_backlog(pol, prof) -> None:  # noqa: ANN001
    # The warm-up runs at five times the scored window's load. Held at the scored window's peak alone, static
    # built a backlog there and carried it into the scored window: 58.3 % attainment, TTFT p95 155 s.
    warm = 300.0
    tr = step(40.0, 8.0, warm, 900.0, isl=800, osl=100, seed=3)
    res = run_backtest(tr, prof, pol, baselines=["static"], warmup_s=warm, workers=1)
    rep, static = res.replays["static"], res.report["policies"]["static"]
    peak = static["peak_replicas"]
    lead = [s for s in rep.timeline if s["t_s"] < warm]
    assert max(s["prefill.ready"] + s["prefill.starting"] for s in lead) > peak["prefill"]  # it led with more
    later = [s for s in rep.timeline if s["t_s"] >= warm + 180.0]
    assert later and all(s["prefill.ready"] == peak["prefill"] for s in later)  # then holds its fixed peak
    assert static["attainment_joint"] >= pol.sla.percentile / 100.0, static["ttft_ms"]
    # The warm-up is not billed: only the lead's replicas still draining in the scored window add to the peak's.
    gpus = sum(n * g for n, g in zip(peak.values(), (1, 2), strict=True))
    assert gpus * (rep.end_s - warm) / 3600.0 <= static["gpu_hours"] <= gpus * (rep.end_s - warm) / 3600.0 * 1.01
