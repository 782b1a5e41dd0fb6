"""`planner bench forecast`: fit + forecast latency per series and per control tick, sliding history."""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from planner.forecast import make_forecaster

DAY_S = 86_400.0
# The models a tick could run in production (the cheap ones and the statsmodels ones), when none are named.
DEFAULT_MODELS = ("last-value", "ewma", "seasonal-delta-daily", "auto", "arima", "kalman-llt", "holt-winters")
# The controller fits five series per tick with one forecaster instance (rate, mean ISL, mean OSL, prompt
# tokens/s, output tokens/s) and reads two horizons from each (interval, start-up + interval).
SERIES_SCALES = (1.0, 20.0, 4.0, 1200.0, 200.0)


def synthetic_rate(n: int, step_s: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A daily-shaped Poisson rate around 50 req/s: the shape the controller sees every tick."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) * step_s
    lam = 50.0 * (1.0 + 0.5 * np.sin(2 * np.pi * t / DAY_S))
    return t, rng.poisson(lam * step_s) / step_s


def time_model(name: str, series: list[tuple[np.ndarray, np.ndarray]], hist: int, ticks: int, step_s: float,
               horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(milliseconds per series fit, milliseconds per tick) over ``ticks`` ticks of sliding history."""
    forecaster = make_forecaster(name)
    per_series, per_tick = [], []
    for i in range(ticks):
        tick_start = time.perf_counter()
        for t, v in series:
            start = time.perf_counter()
            fitted = forecaster.fit(t[i: i + hist], v[i: i + hist])
            fitted.forecast(step_s)
            fitted.forecast(horizon_s)
            per_series.append((time.perf_counter() - start) * 1e3)
        per_tick.append((time.perf_counter() - tick_start) * 1e3)
    return np.asarray(per_series), np.asarray(per_tick)


def run(console: Console, models: list[str], ticks: int, history_s: float, step_s: float, horizon_s: float) -> None:
    hist = max(2, int(history_s // step_s))
    series = [synthetic_rate(hist + ticks, step_s, seed) for seed in range(5)]
    series = [(t, v * scale) for (t, v), scale in zip(series, SERIES_SCALES, strict=True)]
    table = Table(title=f"fit+forecast latency: {hist} points of {step_s:g} s, horizons {step_s:g} s and "
                        f"{horizon_s:g} s, {ticks} ticks", title_justify="left")
    for col in ("model", "series p50 ms", "series p95 ms", "tick p50 ms", "tick p95 ms", "tick max ms",
                "first tick ms"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name in models:
        ms, tk = time_model(name, series, hist, ticks, step_s, horizon_s)
        table.add_row(name, f"{np.percentile(ms, 50):.2f}", f"{np.percentile(ms, 95):.2f}",
                      f"{np.percentile(tk, 50):.2f}", f"{np.percentile(tk, 95):.2f}", f"{tk.max():.1f}",
                      f"{tk[0]:.1f}")
    console.print(table)
