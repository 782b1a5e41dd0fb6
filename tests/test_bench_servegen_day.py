"""The whole-day scenario (servegen-day) against the ServeGen rates it replays, and the static-yesterday
baseline against what it models: yesterday's busiest 10 minutes sized by the what-if, plus 20 %."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from planner.bench import scenarios
from planner.cli import run
from planner.decide.whatif import plan
from planner.errors import UserError
from planner.sim.evaluate.backtest import run_backtest
from planner.sim.evaluate.baselines.static_yesterday import HEADROOM, busiest_window, yesterday_targets
from planner.sim.traces.loaders import load_rate_windows
from planner.sim.traces.records import RequestTrace

TRACES = scenarios.default_traces_dir()
DAY = scenarios.pick(["servegen-day"])[0]
pytestmark = pytest.mark.skipif(TRACES is None, reason="no traces folder (azure2023/, servegen/)")


def _rates(lo_s: float, hi_s: float) -> np.ndarray:
    assert TRACES is not None
    w = load_rate_windows(TRACES / str(DAY.trace_file))
    keep = (w.window_start_s >= lo_s) & (w.window_start_s < hi_s)
    return w.rate_rps[keep] * DAY.rate_scale


def test_the_day_is_the_whole_second_day_played_faster_at_its_own_rates() -> None:
    trace = scenarios.scenario_trace(DAY, TRACES)
    warm_real_s = DAY.warmup_s * DAY.compress
    assert trace.duration_s == pytest.approx(DAY.warmup_s + scenarios.DAY_S / DAY.compress, abs=60.0)
    rates = _rates(DAY.start_s - warm_real_s, DAY.start_s + scenarios.DAY_S)
    expected = float(np.sum(rates * 600.0 / DAY.compress))  # the same rates, each window 1/compress as long
    assert len(trace) == pytest.approx(expected, rel=0.01)
    # The diurnal swing is kept: per played window, requests follow the day's rate windows.
    per_window = np.bincount((trace.arrival_s // (600.0 / DAY.compress)).astype(int), minlength=len(rates))
    got = per_window[:len(rates)] / (600.0 / DAY.compress)
    assert np.corrcoef(got, rates)[0, 1] > 0.99
    day = rates[int(DAY.warmup_s * DAY.compress // 600):]
    assert day.max() / day.min() > 4.0  # the second day's peak over its trough (515 / 93 req/s unscaled)


def test_quick_keeps_the_short_windows() -> None:
    quick = scenarios.scenario_trace(DAY, TRACES, quick=True)
    assert quick.duration_s <= scenarios.QUICK_WARMUP_S + scenarios.QUICK_SCORED_S
    assert scenarios.warmup_s(DAY, True) == scenarios.QUICK_WARMUP_S


def test_yesterday_is_the_first_day_and_its_peak_is_the_days_busiest_window() -> None:
    y = scenarios.yesterday_trace(DAY, TRACES)
    assert y is not None and y.duration_s == pytest.approx(scenarios.DAY_S / DAY.compress, abs=60.0)
    rate, isl, osl = busiest_window(y, scenarios.peak_window_s(DAY))
    peak = float(_rates(0.0, scenarios.DAY_S).max())  # 583 req/s unscaled, day 1 22:20
    assert rate == pytest.approx(peak, rel=0.05)
    assert isl > 0 and osl > 0
    assert scenarios.yesterday_trace(scenarios.pick(["azure-conv"])[0], TRACES) is None


def test_static_yesterday_is_the_what_if_at_the_peak_plus_headroom() -> None:
    policy = scenarios.scenario_policy()
    profile = scenarios.scenario_profile(DAY, policy)
    y = scenarios.yesterday_trace(DAY, TRACES)
    assert y is not None
    rate, isl, osl = busiest_window(y, scenarios.peak_window_s(DAY))
    need = plan(policy.decision(), profile, rate, isl, osl)
    got = yesterday_targets(policy, profile, y, scenarios.peak_window_s(DAY))
    for name, pd in need.pools.items():
        ceiling = getattr(policy.pools, name).max_replicas
        assert got[name] == min(ceiling, math.ceil(pd.replicas * (1 + HEADROOM) - 1e-9))
    assert yesterday_targets(policy, profile, y, scenarios.peak_window_s(DAY), headroom=0.0) == need.targets()


def test_busiest_window_counts_requests_per_window() -> None:
    t = np.array([0.0, 1.0, 2.0, 10.5, 11.0, 12.0, 13.0, 25.0])
    trace = RequestTrace(t, np.array([1.0, 1, 1, 100, 200, 300, 400, 1]), np.full(8, 10.0), "t", "")
    assert busiest_window(trace, 10.0) == (0.4, 250.0, 10.0)
    with pytest.raises(UserError, match="yesterday: the trace has no requests"):
        busiest_window(RequestTrace(np.empty(0), np.empty(0), np.empty(0), "t", ""), 10.0)


def test_static_yesterday_without_a_yesterday_is_one_line_before_any_work(tmp_path: Path, capsys) -> None:
    policy = scenarios.scenario_policy()
    trace = scenarios.synthetic("chat-docs", 0.0, 60.0)
    with pytest.raises(UserError, match=r"^yesterday: static-yesterday needs the previous day's trace$"):
        run_backtest(trace, scenarios.scenario_profile(DAY, policy), policy, baselines=["static-yesterday"])
    out = tmp_path / "out"
    code = run(["backtest", "--trace", str(scenarios.REPO / "profiles/traces/azure2023/AzureLLMInferenceTrace_conv.csv"), "--profile",
                str(scenarios.REPO / "profiles/h200/qwen3-32b.json"), "--policy", str(scenarios.EXAMPLE_POLICY),
                "--out", str(out), "--baselines", "static-yesterday"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--yesterday FILE" in err and not out.exists()
