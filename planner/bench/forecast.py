"""`planner bench forecast`: fit + forecast latency per series and per control tick, sliding history; with
`--held-out`, auto's MASE and last-value's, and their ratio, on series auto was never tuned on."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from planner.errors import UserError
from planner.forecast import heldout, make_forecaster
from planner.forecast.heldout import EvalCase, Row
from planner.sim.evaluate.workers import process_context
from planner.sim.traces.series import load_eval_series

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


# ------------------------------------------------------------------------------ held-out table for `auto`
HELD_OUT_STEPS_S = (30.0, 60.0)
AZURE_HORIZON_S = 180.0
SERVEGEN_HORIZONS_S = (1800.0, 600.0)


def azure_cases(path: Path, kind: str) -> list[EvalCase]:
    """Rate, mean ISL/OSL and prompt/output tokens/s of one Azure trace at 30 s and 60 s steps."""
    out = []
    for step_s in HELD_OUT_STEPS_S:
        data = load_eval_series(path, "azure", step_s, None).data
        rate = data["rate"]
        # Tokens/s per step: sum of lengths / step = rate x mean length; 0 (not "no data") in an idle step.
        work = {"prompt-tps": np.where(rate > 0, rate * np.nan_to_num(data["isl"]), 0.0),
                "output-tps": np.where(rate > 0, rate * np.nan_to_num(data["osl"]), 0.0)}
        for target, values in {"rate": rate, "isl": data["isl"], "osl": data["osl"], **work}.items():
            out.append(EvalCase(f"azure-{kind} {target} {step_s:g}s", data["time_s"], values, step_s,
                                AZURE_HORIZON_S, "held-out", history_s=7 * DAY_S))
    return out


def real_cases(traces: Path) -> list[EvalCase]:
    """Every series the shipped traces give: Azure conv and code (10 each) and ServeGen's rate (2 horizons)."""
    if not traces.is_dir():
        raise UserError(f"traces: {traces} is not a folder; expected a traces folder "
                        "(azure2023/, servegen/)", key="traces")
    out = []
    for kind in ("conv", "code"):
        out += azure_cases(traces / "azure2023" / f"AzureLLMInferenceTrace_{kind}.csv", kind)
    sg = load_eval_series(traces / "servegen" / "aggregate_rate_language_m-large.csv", "servegen", 600.0, None)
    for horizon_s in SERVEGEN_HORIZONS_S:
        out.append(EvalCase(f"servegen rate {sg.step_s:g}s h={horizon_s:g}s", sg.data["time_s"], sg.data["rate"],
                            sg.step_s, horizon_s, "held-out", history_s=7 * DAY_S))
    return out


SETS = ("real", "synthetic", "training", "all")


def held_out_groups(traces: Path, which: str) -> dict[str, list[EvalCase]]:
    """The series of one ``--set``: real = the shipped traces (held out), synthetic = held-out synthetic
    families and seeds, training = the only series auto's constants were tuned on."""
    if which not in SETS:
        raise UserError(f"which: {which!r}; allowed: {', '.join(SETS)}", key="which")
    groups: dict[str, list[EvalCase]] = {}
    if which in ("real", "all"):
        groups["held-out: real traces"] = real_cases(traces)
    if which in ("synthetic", "all"):
        seeds = ", ".join(str(s) for s in heldout.HELD_OUT_SEEDS)
        groups[f"held-out: synthetic (seeds {seeds})"] = heldout.held_out_synthetic()
    if which in ("training", "all"):
        groups["training (auto's constants were tuned on these only)"] = heldout.training()
    return groups


def held_out(console: Console, traces: Path, which: str, workers: int) -> dict[str, object]:
    """Score every case of every group (in ``workers`` processes), print one table per group and a verdict."""
    report: dict[str, object] = {}
    for title, cases in held_out_groups(traces, which).items():
        with ProcessPoolExecutor(max_workers=workers, mp_context=process_context()) as pool:
            rows = list(pool.map(_score, cases))
        held_out_table(console, title, rows)
        worst = max(rows, key=lambda r: r.auto)
        over = [r.name for r in rows if r.auto > 1.0]
        console.print(f"{title}: worst auto / last-value {worst.auto:.4f} ({worst.name}); "
                      f"over 1.000: {', '.join(over) or 'none'}; geometric mean {geomean(rows):.4f}")
        report[title] = {"summary": summary(rows), "rows": [r.as_json() for r in rows]}
    return report


def _score(case: EvalCase) -> Row:
    return heldout.score_case(case, time.perf_counter)


def held_out_table(console: Console, title: str, rows: list[Row]) -> None:
    table = Table(title=title, title_justify="left", caption_justify="left",
                  caption="MASE: MAE / the series' mean absolute one-step change; lv: last-value; ewma/lv: what "
                          "smoothing alone would have got; switched: share of origins auto used another model")
    cols = ("series", "origins", "MASE auto", "MASE lv", "auto/lv", "ewma/lv", "switched")
    for col in cols:
        table.add_column(col, justify="left" if col == "series" else "right", no_wrap=col == "series")
    for r in rows:
        mark = "[bold red]" if r.auto > 1.0 and r.role == "held-out" else ""
        table.add_row(r.name, str(r.origins), f"{r.mase_auto:.3f}", f"{r.mase_last_value:.3f}",
                      f"{mark}{r.auto:.3f}", f"{r.reference:.3f}", f"{100 * r.switched:.0f} %")
    console.print(table)
def geomean(rows: list[Row]) -> float:
    return float(np.exp(np.mean(np.log([r.auto for r in rows]))))


def summary(rows: list[Row]) -> dict[str, object]:
    worst = max(rows, key=lambda r: r.auto)
    return {"series": len(rows), "worst": {"series": worst.name, "mase_ratio": round(worst.auto, 4)},
            "over_1": [r.name for r in rows if r.auto > 1.0], "geomean_ratio": round(geomean(rows), 4)}
