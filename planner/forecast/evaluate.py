"""Rolling-origin evaluation of forecasters on one series (``planner forecast eval``).

At every origin the forecaster sees only the history window that ends at the origin (as the controller
does each tick) and forecasts ``horizon_s`` ahead; the target is the observed value ``ceil(horizon_s /
step)`` steps later. One forecaster instance walks all origins in order, exactly as in the control loop,
so memoised refits and ``auto``'s periodic re-check are part of what is measured.

Metrics per model, over the same origins:
- ``mase``: mean absolute error / last-value's mean absolute error (last-value = 1.0; < 1 is better);
- ``smape``: mean of 2|f - y| / (|f| + |y|) (0/0 counts as 0);
- ``pinball_0.9``, ``pinball_0.95``: quantile loss of the 0.9 / 0.95 quantile (series units);
- ``coverage_0.9``: share of targets at or below the 0.9 quantile (one-sided: capacity is sized from the
  upper quantile, so that is the band that matters; ideal 0.90);
- ``latency_ms_p50`` / ``latency_ms_p95``: fit + forecast wall time per origin, from the injected timer
  (the pure core never reads a clock).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from planner.errors import UserError
from planner.forecast.base import Forecaster
from planner.forecast.registry import make_forecaster

# Given a task's label and its number of steps, returns the callback to call after each step.
ProgressFactory = Callable[[str, int], Callable[[], None]]


@dataclass(frozen=True)
class ModelScore:
    mase: float
    mae: float  # series units (MASE's numerator)
    smape: float
    pinball_09: float
    pinball_095: float
    coverage_09: float
    latency_ms_p50: float
    latency_ms_p95: float
    latency_ms_max: float
    origins: int
    fallbacks: int  # forecasts with ok=False or a fallback reason
    chosen: dict[str, int] = field(default_factory=dict)  # model labels reported by the forecasts

    def as_json(self) -> dict[str, object]:
        return {"mase": _r(self.mase), "smape": _r(self.smape), "pinball_0.9": _r(self.pinball_09),
                "pinball_0.95": _r(self.pinball_095), "coverage_0.9": _r(self.coverage_09),
                "latency_ms_p50": _r(self.latency_ms_p50), "latency_ms_p95": _r(self.latency_ms_p95),
                "latency_ms_max": _r(self.latency_ms_max), "origins": self.origins,
                "fallbacks": self.fallbacks, "chosen": dict(sorted(self.chosen.items(), key=lambda kv: -kv[1])[:5])}


def _r(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


@dataclass(frozen=True)
class Origins:
    """Which grid indices are origins and what each sees."""

    first: int
    stride: int
    history_points: int
    h: int


def origins_for(n: int, step_s: float, horizon_s: float, history_s: float, warmup_s: float,
                stride: int = 1) -> Origins:
    h = max(1, math.ceil(horizon_s / step_s - 1e-9))
    first = max(1, math.ceil(warmup_s / step_s))
    return Origins(first, max(1, stride), max(2, int(history_s // step_s)), h)


def forecasts_at_origins(times_s: np.ndarray, values: np.ndarray, forecaster: Forecaster, horizon_s: float,
                         o: Origins, timer: Callable[[], float],
                         progress: Callable[[], None] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], list[str]]:
    """Per origin: (latency_s array, {"mean", "q0.9", "q0.95", "ok"} arrays, model labels)."""
    idx = list(range(o.first, len(values) - o.h, o.stride))
    lat = np.empty(len(idx))
    out = {key: np.empty(len(idx)) for key in ("mean", "q0.9", "q0.95", "ok")}
    labels: list[str] = []
    for j, i in enumerate(idx):
        lo = max(0, i + 1 - o.history_points)
        t_hist, v_hist = times_s[lo: i + 1], values[lo: i + 1]
        start = timer()
        fc = forecaster.fit(t_hist, v_hist).forecast(horizon_s)
        lat[j] = timer() - start
        out["mean"][j], out["q0.9"][j], out["q0.95"][j] = fc.mean, fc.at(0.9), fc.at(0.95)
        out["ok"][j] = 1.0 if fc.ok and "fallback" not in fc.reason else 0.0
        labels.append(fc.model)
        if progress is not None:
            progress()
    return lat, out, labels


def target_indices(n: int, o: Origins) -> np.ndarray:
    return np.arange(o.first, n - o.h, o.stride) + o.h


def pinball(y: np.ndarray, q_pred: np.ndarray, q: float) -> float:
    d = y - q_pred
    return float(np.mean(np.maximum(q * d, (q - 1.0) * d)))


def score(y: np.ndarray, pred: dict[str, np.ndarray], lat_s: np.ndarray, labels: list[str],
          lv_mae: float) -> ModelScore:
    f = np.where(np.isfinite(pred["mean"]), pred["mean"], 0.0)
    err = np.abs(y - f)
    denom = np.abs(f) + np.abs(y)
    smape = np.where(denom > 0, 2 * err / np.where(denom > 0, denom, 1.0), 0.0)
    q9 = np.where(np.isfinite(pred["q0.9"]), pred["q0.9"], f)
    q95 = np.where(np.isfinite(pred["q0.95"]), pred["q0.95"], f)
    ms = lat_s * 1e3
    chosen: dict[str, int] = {}
    for label in labels:
        chosen[label] = chosen.get(label, 0) + 1
    return ModelScore(
        mase=float(err.mean() / lv_mae) if lv_mae > 0 else math.nan, mae=float(err.mean()),
        smape=float(smape.mean()), pinball_09=pinball(y, q9, 0.9), pinball_095=pinball(y, q95, 0.95),
        coverage_09=float(np.mean(y <= q9 + 1e-12)),
        latency_ms_p50=float(np.percentile(ms, 50)), latency_ms_p95=float(np.percentile(ms, 95)),
        latency_ms_max=float(ms.max()), origins=len(y), fallbacks=int(len(y) - pred["ok"].sum()), chosen=chosen)


def evaluate_series(times_s: np.ndarray, values: np.ndarray, models: list[str], step_s: float, horizon_s: float,
                    history_s: float, warmup_s: float, stride: int, label: str, timer: Callable[[], float],
                    progress: ProgressFactory | None = None) -> dict[str, dict[str, object]]:
    """Score ``models`` on one series at the same origins: model name -> ``ModelScore.as_json()``.

    Last-value always runs (it is MASE's denominator) but is reported only when asked for. Steps whose
    target is NaN (no requests, so no mean length) are left out of every score.
    """
    scores = score_series(times_s, values, {m: make_forecaster(m) for m in models}, step_s, horizon_s, history_s,
                          warmup_s, stride, label, timer, progress)
    return {name: sc.as_json() for name, sc in scores.items()}


def score_series(times_s: np.ndarray, values: np.ndarray, forecasters: dict[str, Forecaster], step_s: float,
                 horizon_s: float, history_s: float, warmup_s: float, stride: int, label: str,
                 timer: Callable[[], float], progress: ProgressFactory | None = None) -> dict[str, ModelScore]:
    """``evaluate_series`` for forecaster instances (e.g. ``auto`` with non-default options)."""
    o = origins_for(len(values), step_s, horizon_s, history_s, warmup_s, stride)
    targets = target_indices(len(values), o)
    if len(targets) < 5:
        raise UserError(f"{label}: only {len(targets)} forecast origins after a {warmup_s:g} s warm-up and a "
                        f"{horizon_s:g} s horizon; use a longer series, a smaller warmup_s or horizon_s",
                        mentions=("warmup_s", "horizon_s"))
    y = values[targets]
    keep = np.isfinite(y)  # a step with no requests has no mean ISL/OSL to score against
    run_models = {"last-value": forecasters.get("last-value") or make_forecaster("last-value"), **forecasters}
    results = {}
    for name, forecaster in run_models.items():
        advance = progress(f"{label} {name}", len(targets)) if progress is not None else None
        results[name] = forecasts_at_origins(times_s, values, forecaster, horizon_s, o, timer, advance)
    lv_pred = results["last-value"][1]["mean"]
    lv_mae = float(np.mean(np.abs(y[keep] - np.nan_to_num(lv_pred[keep]))))
    out = {}
    for name in run_models:
        if name not in forecasters:
            continue
        lat, pred, labels = results[name]
        sub = {k: v[keep] for k, v in pred.items()}
        out[name] = score(y[keep], sub, lat, [lab for lab, ok in zip(labels, keep, strict=True) if ok], lv_mae)
    return out
