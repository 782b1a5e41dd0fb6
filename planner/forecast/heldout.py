"""PURE: the held-out protocol for ``auto``'s gate: training series (the only ones its constants were tuned
on) and held-out synthetic series, plus the table of MASE ratios to last-value.

Training (``training()``): AR(1) at three persistences, a local level (random walk seen through noise) at
three noise ratios, piecewise-linear trends, alternating regimes (noise / random walk), bursty Poisson
counts on a log-AR level, and a daily-seasonal Poisson rate at 10-minute steps; seeds 0-2.
Held out (``held_out_synthetic``): the shapes whose optimal forecast is known and where a careless selector
loses: random walks (last-value is optimal), on/off traffic, level shifts, pure noise (the mean is
optimal) and heavy-tailed noise; seeds ``HELD_OUT_SEEDS``, never used in tuning. Every real series
(``planner bench forecast --held-out`` builds them from the shipped traces) is held out too.

The synthetic series look like what the controller sees: 30 s steps, 6 h (720 points), forecast 150 s
(5 steps) ahead, evaluated at every origin after a quarter of the span with 6 h of history.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.forecast.base import Forecaster
from planner.forecast.evaluate import ProgressFactory, score_series
from planner.forecast.registry import make_forecaster

STEP_S = 30.0
POINTS = 720
HORIZON_S = 150.0
HISTORY_S = 6 * 3600.0
TRAINING_SEEDS = (0, 1, 2)
# Each held-out set is used up once the gate is revised after seeing it (100-102 and 200-204 are), so the
# held-out claim rests on seeds no version of the gate has been tuned on (README, "Held out").
HELD_OUT_SEEDS = (300, 301, 302, 303, 304)


@dataclass(frozen=True)
class EvalCase:
    """One series to score: values on a regular grid, the horizon, and whether it was used for tuning."""

    name: str
    times_s: np.ndarray
    values: np.ndarray
    step_s: float
    horizon_s: float
    role: str  # "training" or "held-out"
    history_s: float = HISTORY_S


Generator = Callable[[np.random.Generator, int], np.ndarray]


def random_walk(rng: np.random.Generator, n: int) -> np.ndarray:
    return 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, n)))


def on_off(rng: np.random.Generator, n: int) -> np.ndarray:
    """Bursts of ~2 req/s (Poisson counts per step) and idle spells; each step switches with p = 0.05."""
    state = np.cumsum(rng.random(n) < 0.05) % 2
    return rng.poisson(2.0 * STEP_S * state) / STEP_S


def level_shifts(rng: np.random.Generator, n: int) -> np.ndarray:
    """Piecewise-constant levels (a new one every ~120 steps) with 5 % noise: the mean since the shift is optimal."""
    level = rng.uniform(20.0, 200.0, n)[np.cumsum(rng.random(n) < 1 / 120)]
    return np.maximum(0.0, level * (1.0 + rng.normal(0.0, 0.05, n)))


def noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.maximum(0.0, rng.normal(100.0, 15.0, n))


def heavy_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return 50.0 * rng.lognormal(0.0, 0.8, n)


def ar1(phi: float) -> Generator:
    def gen(rng: np.random.Generator, n: int) -> np.ndarray:
        x = np.zeros(n)
        e = rng.normal(0.0, 10.0, n)
        for i in range(1, n):
            x[i] = phi * x[i - 1] + e[i]
        return np.maximum(0.0, 200.0 + x)
    return gen


def local_level(noise_ratio: float) -> Generator:
    def gen(rng: np.random.Generator, n: int) -> np.ndarray:
        level = 100.0 + np.cumsum(rng.normal(0.0, 1.0, n))
        return np.maximum(0.0, level + rng.normal(0.0, noise_ratio, n))
    return gen


def trend_segments(rng: np.random.Generator, n: int) -> np.ndarray:
    slope = rng.normal(0.0, 0.3, n)[np.cumsum(rng.random(n) < 1 / 90)]
    return np.maximum(0.0, 150.0 + np.cumsum(slope) + rng.normal(0.0, 2.0, n))


def regimes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Blocks of 120 steps that alternate between pure noise and a random walk (the best model changes)."""
    walk = np.cumsum(rng.normal(0.0, 3.0, n))
    calm = (np.arange(n) // 120) % 2 == 0
    level = np.where(calm, 0.0, walk - walk[np.maximum(0, (np.arange(n) // 120) * 120 - 1)])
    return np.maximum(0.0, 100.0 + level + np.where(calm, rng.normal(0.0, 8.0, n), 0.0))


def bursty_poisson(rng: np.random.Generator, n: int) -> np.ndarray:
    log_level = np.zeros(n)
    e = rng.normal(0.0, 0.3, n)
    for i in range(1, n):
        log_level[i] = 0.9 * log_level[i - 1] + e[i]
    return rng.poisson(1.0 * STEP_S * np.exp(log_level)) / STEP_S


def daily_poisson(rng: np.random.Generator, n: int) -> np.ndarray:
    """10-minute steps: a daily sine (peak/trough 3) with day-to-day scale changes and Poisson counts."""
    t = np.arange(n) * 600.0
    day_scale = np.exp(rng.normal(0.0, 0.15, n // 144 + 1))[(t // 86_400).astype(int)]
    lam = 20.0 * day_scale * (1.0 + 0.5 * np.sin(2 * math.pi * t / 86_400))
    return rng.poisson(lam * 600.0) / 600.0


TRAINING_FAMILIES: dict[str, Generator] = {
    "ar1-0.5": ar1(0.5), "ar1-0.9": ar1(0.9), "ar1-0.99": ar1(0.99),
    "local-level-0.3": local_level(0.3), "local-level-1": local_level(1.0), "local-level-3": local_level(3.0),
    "trend-segments": trend_segments, "regimes": regimes, "bursty-poisson": bursty_poisson,
}
HELD_OUT_FAMILIES: dict[str, Generator] = {
    "random-walk": random_walk, "on-off": on_off, "level-shifts": level_shifts, "noise": noise,
    "heavy-noise": heavy_noise,
}


@dataclass(frozen=True)
class Shape:
    """Length, step and horizon of a synthetic series."""

    points: int
    step_s: float
    horizon_s: float

    def label(self) -> str:
        return f"{self.points}x{self.step_s:g}s h={self.horizon_s:g}s"


# 6 h of 30 s ticks (the policy's default history) at the controller's horizons: one interval (1 step),
# start-up + interval (5 steps), a slow start-up (20 steps). And one hour at 30 s and 60 s, forecast 180 s
# ahead: a young history, where every decision is made on few origins (the controller's first hour).
LONG = {h: Shape(720, STEP_S, h) for h in (30.0, 150.0, 600.0)}
SHORT = (Shape(120, 30.0, 180.0), Shape(60, 60.0, 180.0))
TRAINING_SHAPES = (LONG[150.0], LONG[30.0], LONG[600.0], *SHORT)
HELD_OUT_SHAPES = (LONG[150.0], *SHORT)


def synthetic(families: dict[str, Generator], seeds: tuple[int, ...], shapes: tuple[Shape, ...],
              role: str) -> list[EvalCase]:
    out = []
    for shape in shapes:
        for name, gen in families.items():
            for seed in seeds:
                values = gen(np.random.default_rng(seed), shape.points)
                out.append(EvalCase(f"{name}/{seed} {shape.label()}", np.arange(shape.points) * shape.step_s,
                                    values, shape.step_s, shape.horizon_s, role))
    return out


def training() -> list[EvalCase]:
    cases = synthetic(TRAINING_FAMILIES, TRAINING_SEEDS, TRAINING_SHAPES, "training")
    for seed in TRAINING_SEEDS[:3]:  # 8 days of 10-minute steps: the seasonal candidates come into play
        n = 8 * 144
        values = daily_poisson(np.random.default_rng(seed), n)
        cases.append(EvalCase(f"daily-poisson/{seed} {n}x600s h=1800s", np.arange(n) * 600.0, values, 600.0,
                              1800.0, "training", history_s=7 * 86_400.0))
    return cases


def held_out_synthetic() -> list[EvalCase]:
    return synthetic(HELD_OUT_FAMILIES, HELD_OUT_SEEDS, HELD_OUT_SHAPES, "held-out")


@dataclass(frozen=True)
class Row:
    name: str
    role: str
    origins: int
    auto: float  # MASE ratio of auto to last-value (the project's MASE: MAE / last-value's MAE)
    reference: float  # MASE ratio of the reference model (e.g. ewma), for "what was there to gain"
    switched: float  # share of origins where auto used a candidate other than last-value
    mase_auto: float = math.nan  # Hyndman's MASE: MAE / in-sample mean absolute one-step change of the series
    mase_last_value: float = math.nan

    def as_json(self) -> dict[str, object]:
        def r(x: float) -> float | None:
            return round(x, 4) if math.isfinite(x) else None

        return {"series": self.name, "role": self.role, "origins": self.origins, "auto_mase_ratio": r(self.auto),
                "reference_mase_ratio": r(self.reference), "switched_share": r(self.switched),
                "mase_auto": r(self.mase_auto), "mase_last_value": r(self.mase_last_value)}


def naive_scale(values: np.ndarray) -> float:
    """Mean absolute one-step change over the whole series (Hyndman & Koehler's MASE scale; NaN steps skipped)."""
    steps = np.abs(np.diff(values))
    steps = steps[np.isfinite(steps)]
    return float(steps.mean()) if len(steps) and steps.mean() > 0 else math.nan


def score_case(case: EvalCase, timer: Callable[[], float], auto: Forecaster | None = None,
               reference: str = "ewma", progress: ProgressFactory | None = None) -> Row:
    """Auto's (and the reference's) MASE ratio on one case, walking every origin as the controller does."""
    span_s = float(case.times_s[-1] - case.times_s[0])
    models = {"last-value": make_forecaster("last-value"), "auto": auto or make_forecaster("auto"),
              reference: make_forecaster(reference)}
    res = score_series(case.times_s, case.values, models, case.step_s, case.horizon_s, case.history_s,
                       span_s / 4, 1, case.name, timer, progress)
    kept = res["auto"].chosen.get("auto:last-value", 0)
    origins = res["auto"].origins
    scale = naive_scale(case.values)
    return Row(case.name, case.role, origins, res["auto"].mase, res[reference].mase,
               1.0 - kept / origins if origins else 0.0, res["auto"].mae / scale, res["last-value"].mae / scale)
