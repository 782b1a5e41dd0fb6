"""Forecasters: edge-case histories, shapes with a known answer, never-negative, coverage, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.forecast import make_forecaster
from planner.forecast.base import LastValue
from planner.forecast.heavy import Arima
from planner.forecast.registry import REGISTRY
from planner.testing.clock import FakeClock
from planner.types import QUANTILES, Forecast

ALL = sorted(REGISTRY)
CHEAP = ["last-value", "moving-average", "ewma", "holt", "seasonal-naive-daily", "seasonal-naive-weekly",
         "seasonal-delta-daily", "auto"]
HEAVY = ["arima", "kalman-llt", "holt-winters"]
STEP_S = 60.0


def grid(values: list[float] | np.ndarray, step_s: float = STEP_S) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=float)
    return np.arange(len(v)) * step_s + 1_700_000_000.0, v


# The statsmodels models estimate on fewer points in the shape tests, to keep the suite fast on 2 cores
# (the never-negative and determinism tests run them with their defaults).
FAST = {"arima": {"fit_points": 60}, "kalman-llt": {"fit_points": 60}}


def run(name: str, values: list[float] | np.ndarray, horizon_s: float = 180.0, step_s: float = STEP_S,
        fast: bool = True) -> Forecast:
    t, v = grid(values, step_s)
    return make_forecaster(name, **(FAST.get(name, {}) if fast else {})).fit(t, v).forecast(horizon_s)


def assert_well_formed(fc: Forecast) -> None:
    assert set(fc.quantiles) == set(QUANTILES)
    qs = [fc.quantiles[q] for q in QUANTILES]
    if fc.ok:
        assert math.isfinite(fc.mean) and fc.mean >= 0
        assert all(math.isfinite(q) and q >= 0 for q in qs)
        assert qs == sorted(qs), f"quantiles not monotone: {qs}"


# ----------------------------------------------------------------------------------- no-forecast histories
NO_FORECAST = [
    pytest.param([], math.nan, "empty", id="empty"),
    pytest.param([math.nan] * 5, math.nan, "NaN", id="all-nan"),
    pytest.param([7.0], 7.0, "single-point", id="single-point"),
    pytest.param([math.nan, 7.0, math.nan], 7.0, "single-point", id="single-finite-point"),
    pytest.param([0.0] * 20, 0.0, "all-zero", id="all-zero"),
    pytest.param([-1.0, -2.0], math.nan, "negative", id="all-negative"),
]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("values,fallback,why", NO_FORECAST)
def test_no_forecast_histories_return_a_reason(name: str, values: list[float], fallback: float, why: str) -> None:
    fc = run(name, values)
    assert not fc.ok
    assert why in fc.reason
    assert (math.isnan(fc.mean) and math.isnan(fallback)) or fc.mean == fallback
    assert fc.horizon_s == 180.0


@pytest.mark.parametrize("name", ALL)
def test_bad_horizon_is_a_no_forecast(name: str) -> None:
    fc = run(name, [5.0, 6.0, 7.0], horizon_s=math.nan)
    assert not fc.ok and "horizon" in fc.reason


# ------------------------------------------------------------------------------------------- known shapes
@pytest.mark.parametrize("name", ALL)
def test_constant_series_forecasts_the_constant(name: str) -> None:
    fc = run(name, [42.0] * 150)
    assert fc.ok
    assert fc.mean == pytest.approx(42.0, rel=1e-3)
    for q in QUANTILES:
        assert fc.quantiles[q] == pytest.approx(42.0, rel=0.02)


@pytest.mark.parametrize("name", ["holt", "kalman-llt", "arima", "holt-winters", "auto"])
def test_linear_trend_beats_last_value(name: str) -> None:
    y = 100.0 + 0.5 * np.arange(150)
    truth = 100.0 + 0.5 * (149 + 3)
    fc = run(name, y)
    lv_err = abs(run("last-value", y).mean - truth)
    assert abs(fc.mean - truth) < 0.5 * lv_err, (fc.mean, truth, fc.model)


@pytest.mark.parametrize("name", ["seasonal-naive-daily", "seasonal-delta-daily", "auto"])
def test_daily_sinusoid_is_forecast_from_its_period(name: str) -> None:
    step_s = 600.0
    n = 144 * 4  # four days of 10-minute steps
    x = np.arange(n + 3)
    y = 100.0 + 50.0 * np.sin(2 * np.pi * x / 144)
    fc = run(name, y[:n], horizon_s=1800.0, step_s=step_s)
    lv_err = abs(y[n - 1] - y[n + 2])
    assert abs(fc.mean - y[n + 2]) < 0.2 * lv_err, (fc.mean, y[n + 2], fc.model)
    assert "seasonal" in fc.model or name != "auto"


@pytest.mark.parametrize("name", ["last-value", "ewma", "holt", "moving-average", "kalman-llt", "arima", "auto"])
def test_step_is_followed(name: str) -> None:
    y = [10.0] * 200 + [50.0] * 60
    fc = run(name, y)
    assert fc.mean == pytest.approx(50.0, rel=0.05)


# ------------------------------------------------------------------------------------- history handling
def test_gaps_and_nans_are_interpolated_not_zeroed() -> None:
    t = np.array([0.0, 60.0, 120.0, 300.0, 360.0, 420.0])  # 180 and 240 missing
    v = np.array([10.0, 10.0, math.nan, 10.0, 10.0, 10.0])
    fc = make_forecaster("auto").fit(t, v).forecast(60.0)
    assert fc.ok and fc.mean == pytest.approx(10.0)


def test_leading_zeros_do_not_drag_the_level_down() -> None:
    fc = run("moving-average", [0.0] * 50 + [20.0] * 3)
    assert fc.mean == pytest.approx(20.0)


def test_long_gap_keeps_only_the_segment_after_it() -> None:
    t = np.concatenate([np.arange(50) * 60.0, 100_000.0 + np.arange(20) * 60.0])
    v = np.concatenate([np.full(50, 500.0), np.full(20, 5.0)])
    fc = make_forecaster("moving-average", window=50).fit(t, v).forecast(60.0)
    assert fc.mean == pytest.approx(5.0)


def test_unsorted_history_is_sorted() -> None:
    t, v = grid([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    order = np.random.default_rng(0).permutation(len(t))
    a = make_forecaster("holt").fit(t, v).forecast(120.0)
    b = make_forecaster("holt").fit(t[order], v[order]).forecast(120.0)
    assert a == b


# --------------------------------------------------------------------------------------------- properties
series = st.lists(st.one_of(st.floats(0, 1e6), st.just(math.nan), st.just(0.0)), min_size=0, max_size=80)


@pytest.mark.parametrize("name", CHEAP)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=series, horizon_s=st.floats(0, 3600))
def test_never_negative_and_never_raises(name: str, values: list[float], horizon_s: float) -> None:
    fc = run(name, values, horizon_s=horizon_s)
    assert_well_formed(fc)


@pytest.mark.parametrize("name", HEAVY)
@pytest.mark.parametrize("values", [
    pytest.param(list(np.linspace(100, 0, 60)), id="falling-to-zero"),
    pytest.param([0.0, 1000.0] * 30, id="alternating"),
    pytest.param(list(np.abs(np.random.default_rng(3).standard_cauchy(60))), id="heavy-tailed"),
])
def test_heavy_models_never_negative(name: str, values: list[float]) -> None:
    fc = run(name, values, horizon_s=600.0, fast=False)
    assert_well_formed(fc)
    assert fc.ok


def test_auto_interval_coverage_on_simulated_poisson_load() -> None:
    rng = np.random.default_rng(7)
    n = 1500
    level = 80.0 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    y = rng.poisson(level * STEP_S) / STEP_S
    t = np.arange(n) * STEP_S
    forecaster = make_forecaster("auto")
    hits = []
    for i in range(700, n - 3, 2):
        fc = forecaster.fit(t[i - 600: i + 1], y[i - 600: i + 1]).forecast(180.0)
        hits.append(y[i + 3] <= fc.at(0.9))
    assert 0.82 <= float(np.mean(hits)) <= 0.97


# ------------------------------------------------------------------------------------ determinism, memo
@pytest.mark.parametrize("name", ["auto", "arima", "holt-winters"])
def test_same_input_same_forecast_regardless_of_calls_in_between(name: str) -> None:
    rng = np.random.default_rng(1)
    a = grid(50 + rng.normal(0, 5, 80))
    b = grid(500 + rng.normal(0, 50, 80))
    f = make_forecaster(name)
    first = f.fit(*a).forecast(180.0)
    f.fit(*b).forecast(180.0)
    f.fit(*b).forecast(600.0)
    assert f.fit(*a).forecast(180.0) == first
    assert make_forecaster(name).fit(*a).forecast(180.0) == first


def test_fitted_is_not_changed_by_later_fits() -> None:
    f = make_forecaster("auto")
    fitted = f.fit(*grid([10.0] * 100))
    before = fitted.forecast(180.0)
    f.fit(*grid([1000.0] * 100)).forecast(180.0)
    assert fitted.forecast(180.0) == before


def test_auto_reuses_its_choice_between_rechecks() -> None:
    f = make_forecaster("auto", recheck_steps=10)
    rng = np.random.default_rng(2)
    y = 100 + rng.normal(0, 10, 400)
    t = np.arange(400) * STEP_S
    for i in range(300, 320):
        f.fit(t[: i + 1], y[: i + 1]).forecast(180.0)
    assert len(f._memo) == 2  # 20 ticks, anchors every 10 steps


# ---------------------------------------------------------------------------------------- failure paths
def test_estimate_failure_falls_back_to_last_value_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: Arima, y: np.ndarray, s: object) -> None:
        raise np.linalg.LinAlgError("singular matrix")

    monkeypatch.setattr(Arima, "estimate", boom)
    fc = run("arima", list(range(1, 60)))
    assert fc.ok
    assert fc.model == "last-value"
    assert "arima" in fc.reason and "fallback" in fc.reason and "singular" in fc.reason
    assert fc.mean == 59.0


def test_injected_budget_stops_the_order_grid() -> None:
    clock = FakeClock(0.0)

    def tick() -> float:
        return clock.advance(5.0)  # each read: 5 s later, so the 1 s budget is spent after one order

    f = Arima(clock=tick, budget_s=1.0)
    t, v = grid(50 + np.random.default_rng(4).normal(0, 3, 120))
    fc = f.fit(t, v).forecast(180.0)
    assert fc.ok and fc.model.startswith("arima(0, 1, 1)")


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="auto"):
        make_forecaster("prophet")


def test_registry_names_are_stable() -> None:
    assert {"last-value", "moving-average", "ewma", "holt", "seasonal-naive-daily", "seasonal-naive-weekly",
            "seasonal-delta-daily", "holt-winters", "arima", "kalman-llt", "auto"} <= set(REGISTRY)


def test_band_after_an_idle_window_keeps_the_bursts_that_followed_idle_windows() -> None:
    # On/off traffic (the Azure code trace's shape): 2 windows of 100 req/s, then 2 idle windows, repeated.
    y = [100.0, 100.0, 0.0, 0.0] * 20
    times = [30.0 * i for i in range(len(y))]
    fc = LastValue().fit(times, y).forecast(60.0)  # last value 0: the next burst is 2 windows away
    assert fc.mean == 0.0
    assert 50.0 <= fc.at(0.9) <= 100.0  # a burst is likely within the horizon; never above what was seen


def test_band_after_a_step_from_a_low_base_is_capped() -> None:
    # A long quiet history at 1 req/s, then a step to 30: relative errors of 29x must not forecast 900.
    y = [1.0] * 40 + [30.0] * 3
    times = [30.0 * i for i in range(len(y))]
    fc = LastValue().fit(times, y).forecast(60.0)
    assert fc.mean == 30.0
    assert fc.at(0.99) <= 60.0


@pytest.mark.parametrize("calm_ticks, wide", [
    pytest.param(150, False, id="an-hour-and-a-quarter-calm-the-band-is-calm"),
    pytest.param(60, True, id="half-an-hour-calm-the-swings-still-count"),
])
def test_the_band_follows_the_last_hours_regime(calm_ticks: int, wide: bool) -> None:
    # Three hours of a swinging load (+-30 % from 30 s to 30 s, a compressed day's ramps), then a calm stretch
    # (+-2 %). The band is learnt from the last RESIDUAL_WINDOW origins (an hour of 30 s ticks): once the calm
    # has lasted longer than that, the swings no longer widen it; before, they still do.
    rng = np.random.default_rng(5)
    swinging = 100.0 * (1.0 + 0.3 * rng.standard_normal(360))
    calm = 100.0 * (1.0 + 0.02 * rng.standard_normal(calm_ticks))
    y = np.maximum(1.0, np.concatenate([swinging, calm]))
    fc = LastValue().fit(30.0 * np.arange(len(y)), y).forecast(60.0)
    assert (fc.at(0.9) > 1.2 * fc.mean) == wide, (fc.mean, fc.at(0.9))
