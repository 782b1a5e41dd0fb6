"""`planner forecast eval` and `planner bench forecast`."""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from planner.commands.args import positive
from planner.errors import UserError
from planner.sim.traces import open_data_file

EVAL_FORMATS = ("azure", "mooncake", "servegen", "csv")
TARGETS = ("rate", "isl", "osl")
DAY_S = 86_400.0


# ------------------------------------------------------------------------------------------------ series
def bin_requests(arrival_s: np.ndarray, isl: np.ndarray, osl: np.ndarray, step_s: float) -> dict[str, np.ndarray]:
    """Per-request rows -> per-step request rate and mean ISL/OSL (NaN where a step had no request).

    The last, partial step is dropped: its rate would read low only because it was cut short.
    """
    span = float(arrival_s[-1]) if len(arrival_s) else 0.0
    n = int(span // step_s)
    if n < 2:
        raise UserError(f"--step-s {step_s:g}: the trace spans {span:g} s, fewer than two steps")
    idx = (arrival_s // step_s).astype(np.int64)
    keep = idx < n
    idx = idx[keep]
    count = np.bincount(idx, minlength=n).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        isl_mean = np.bincount(idx, weights=isl[keep], minlength=n) / count
        osl_mean = np.bincount(idx, weights=osl[keep], minlength=n) / count
    return {"time_s": np.arange(n) * step_s, "rate": count / step_s, "isl": isl_mean, "osl": osl_mean}


def read_series_csv(path: Path, column: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    """A plain series CSV: first column time in seconds, then value columns (``--column`` picks one)."""
    with open_data_file(path, "--series file") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in (next(reader, None) or [])]
        if len(header) < 2:
            raise UserError(f"{path}:1: expected a header 'time_s,<value column>[,...]', got {header}")
        col = column or header[1]
        if col not in header[1:]:
            raise UserError(f"--column: {col!r} is not a value column of {path}; columns: {', '.join(header[1:])}")
        ci = header.index(col)
        times, vals = [], []
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                t = float(row[0])
            except (ValueError, IndexError):
                raise UserError(f"{path}:{line}: column {header[0]!r} value {row[:1]} is not a number") from None
            try:
                v = float(row[ci]) if row[ci].strip() else math.nan  # empty cell = missing sample
            except (ValueError, IndexError):
                raise UserError(f"{path}:{line}: column {col!r} value {row[ci:ci + 1]} is not a number") from None
            times.append(t)
            vals.append(v)
    if len(times) < 3:
        raise UserError(f"{path}: {len(times)} rows; need at least 3")
    return np.asarray(times), np.asarray(vals), col


def load_eval_series(path: Path, fmt: str, step_s: float, column: str | None,
                     console: Console) -> tuple[dict[str, np.ndarray], float, str]:
    """{"time_s": ..., target: values} with the step actually used and a one-line description."""
    if fmt not in EVAL_FORMATS:
        raise UserError(f"--format: {fmt!r}; allowed: {', '.join(EVAL_FORMATS)}")
    if not path.exists():
        raise UserError(f"--series: {path} not found")
    if fmt == "servegen":
        from planner.sim.traces import load_rate_windows

        w = load_rate_windows(path)
        step = float(np.median(w.window_s))
        if step != step_s:
            console.print(f"[dim]servegen windows are {step:g} s; using them as given (--step-s {step_s:g} ignored)")
        return {"time_s": w.window_start_s, "rate": w.rate_rps}, step, f"{path.name}: {len(w)} windows of {step:g} s"
    if fmt == "csv":
        t, v, col = read_series_csv(path, column)
        step = float(np.median(np.diff(t)))
        return {"time_s": t, "rate": v}, step, f"{path.name}: column {col}, {len(t)} rows, step {step:g} s"
    from planner.sim.traces import load_requests

    trace = load_requests(path, fmt)
    series = bin_requests(trace.arrival_s, trace.isl.astype(np.float64), trace.osl.astype(np.float64), step_s)
    return series, step_s, f"{path.name}: {len(trace)} requests binned into {len(series['rate'])} steps of {step_s:g} s"


# ------------------------------------------------------------------------------------------------ eval
def evaluate_series(times_s: np.ndarray, values: np.ndarray, models: list[str], step_s: float, horizon_s: float,
                    history_s: float, warmup_s: float, stride: int, label: str,
                    console: Console) -> dict[str, dict[str, object]]:
    from planner.forecast import make_forecaster
    from planner.forecast.evaluate import forecasts_at_origins, origins_for, score, target_indices

    o = origins_for(len(values), step_s, horizon_s, history_s, warmup_s, stride)
    targets = target_indices(len(values), o)
    if len(targets) < 5:
        raise UserError(f"{label}: only {len(targets)} forecast origins after a {warmup_s:g} s warm-up and a "
                        f"{horizon_s:g} s horizon; use a longer series, a smaller --warmup-s or --horizon-s")
    y = values[targets]
    keep = np.isfinite(y)  # a step with no requests has no mean ISL/OSL to score against
    run_models = ["last-value", *[m for m in models if m != "last-value"]]
    results = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        for name in run_models:
            task = bar.add_task(f"{label} {name}", total=len(targets))
            forecaster = make_forecaster(name)
            def advance(task: TaskID = task) -> None:
                bar.advance(task)

            lat, pred, labels = forecasts_at_origins(times_s, values, forecaster, horizon_s, o, time.perf_counter,
                                                     advance)
            results[name] = (lat, pred, labels)
    lv_pred = results["last-value"][1]["mean"]
    lv_mae = float(np.mean(np.abs(y[keep] - np.nan_to_num(lv_pred[keep]))))
    out = {}
    for name in run_models:
        if name not in models:
            continue
        lat, pred, labels = results[name]
        sub = {k: v[keep] for k, v in pred.items()}
        out[name] = score(y[keep], sub, lat, [lab for lab, ok in zip(labels, keep, strict=True) if ok],
                          lv_mae).as_json()
    return out


def render_table(console: Console, title: str, models: dict[str, dict[str, object]]) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("model", "MASE", "sMAPE", "pinball .9", "pinball .95", "cover .9", "p50 ms", "p95 ms", "fallbk",
                "most chosen"):
        table.add_column(col, justify="left" if col in ("model", "most chosen") else "right")

    def f(x: object, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    mases = [float(m["mase"]) for m in models.values() if isinstance(m["mase"], int | float)]
    best = min(mases, default=None)
    for name, m in models.items():
        chosen = m.get("chosen") or {}
        top = next(iter(chosen), "") if isinstance(chosen, dict) else ""
        mase = f(m["mase"], ".3f")
        table.add_row(name, f"[bold]{mase}[/]" if m["mase"] == best else mase, f(m["smape"], ".3f"),
                      f(m["pinball_0.9"], ".3g"), f(m["pinball_0.95"], ".3g"), f(m["coverage_0.9"], ".2f"),
                      f(m["latency_ms_p50"], ".2f"), f(m["latency_ms_p95"], ".2f"), str(m["fallbacks"]),
                      top if top != name else "")
    console.print(table)


def parse_models(text: str | None) -> list[str]:
    from planner.forecast.registry import DEFAULT_EVAL_MODELS, REGISTRY

    if text is None:
        return list(DEFAULT_EVAL_MODELS)
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise UserError(f"--models {text!r}: expected a comma-separated list of model names")
    known = set(REGISTRY) | {"last-value"}
    for name in names:
        if name not in known:
            raise UserError(f"--models: unknown model {name!r}; allowed: {', '.join(sorted(known))}")
    return list(dict.fromkeys(names))


# ------------------------------------------------------------------------------------------------ bench
def synthetic_rate(n: int, step_s: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A daily-shaped Poisson rate around 50 req/s: the shape the controller sees every tick."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) * step_s
    lam = 50.0 * (1.0 + 0.5 * np.sin(2 * np.pi * t / DAY_S))
    return t, rng.poisson(lam * step_s) / step_s


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    forecast_app = typer.Typer(no_args_is_help=True, help="Forecasters: evaluate them on real series.")
    app.add_typer(forecast_app, name="forecast")

    @forecast_app.command("eval")
    def eval_cmd(
        series: Annotated[Path, typer.Option("--series", help="trace or series file")],
        fmt: Annotated[str, typer.Option("--format", help="azure | mooncake | servegen | csv "
                                         "(csv: time_s,<value>[,...] per row)")] = "azure",
        step_s: Annotated[float, typer.Option("--step-s", help="bin width for per-request traces (s)")] = 60.0,
        horizon_s: Annotated[float, typer.Option("--horizon-s", help="forecast horizon (s)")] = 180.0,
        models: Annotated[str | None, typer.Option("--models", help="comma-separated model names "
                                                   "(default: all registered)")] = None,
        target: Annotated[str, typer.Option("--target", help="rate | isl | osl | all (per-request traces)")] = "rate",
        history_s: Annotated[float, typer.Option("--history-s", help="history each origin sees (s)")] = 7 * DAY_S,
        warmup_s: Annotated[float | None, typer.Option("--warmup-s", help="no origins before this (s); default: "
                                                       "a quarter of the span, at most 2 days")] = None,
        stride: Annotated[int, typer.Option("--stride", help="evaluate every n-th origin")] = 1,
        column: Annotated[str | None, typer.Option("--column", help="csv value column")] = None,
        out: Annotated[Path | None, typer.Option("--out", help="write the results as JSON")] = None,
    ) -> None:
        """Rolling-origin evaluation: MASE vs last-value, sMAPE, pinball loss, coverage, latency."""
        console = Console()
        positive("--step-s", step_s)
        positive("--horizon-s", horizon_s)
        positive("--history-s", history_s)
        if stride < 1:
            raise UserError(f"--stride: {stride} must be >= 1")
        if target not in (*TARGETS, "all"):
            raise UserError(f"--target: {target!r}; allowed: {', '.join(TARGETS)}, all")
        names = parse_models(models)
        data, step, desc = load_eval_series(series, fmt, step_s, column, console)
        targets = [t for t in TARGETS if t in data] if target == "all" else [target]
        if target not in ("rate", "all") and target not in data:
            raise UserError(f"--target {target}: format {fmt} has only a request rate")
        span = float(data["time_s"][-1] - data["time_s"][0])
        warm = min(2 * DAY_S, span / 4) if warmup_s is None else warmup_s
        console.print(f"{desc}; horizon {horizon_s:g} s ({math.ceil(horizon_s / step - 1e-9)} steps), "
                      f"history {history_s:g} s, warm-up {warm:g} s")
        report: dict[str, object] = {"series": str(series), "format": fmt, "step_s": step, "horizon_s": horizon_s,
                                     "history_s": history_s, "warmup_s": warm}
        per_target = {}
        for tgt in targets:
            res = evaluate_series(data["time_s"], data[tgt], names, step, horizon_s, history_s, warm, stride,
                                  tgt, console)
            render_table(console, f"{series.name} - {tgt} - horizon {horizon_s:g} s", res)
            per_target[tgt] = {"models": res}
        report["models"] = per_target[targets[0]]["models"]
        if len(targets) > 1:
            report["targets"] = per_target
        if out is not None:
            out.write_text(json.dumps(report, indent=2) + "\n")
            console.print(f"wrote {out}")

    @bench_app.command("forecast")
    def bench_forecast(
        models: Annotated[str | None, typer.Option("--models", help="comma-separated model names")] = None,
        ticks: Annotated[int, typer.Option(help="control ticks to time per model")] = 300,
        history_s: Annotated[float, typer.Option("--history-s", help="history per tick (s); the "
                                                 "policy default is 6 h")] = 6 * 3600.0,
        step_s: Annotated[float, typer.Option("--step-s", help="tick interval (s)")] = 30.0,
        horizon_s: Annotated[float, typer.Option("--horizon-s", help="start-up + interval (s)")] = 150.0,
    ) -> None:
        """Fit + forecast latency per series and per control tick (5 series x 2 horizons), sliding history."""
        from planner.forecast import make_forecaster

        console = Console()
        positive("--history-s", history_s)
        positive("--step-s", step_s)
        if ticks < 1:
            raise UserError(f"--ticks: {ticks} must be >= 1")
        names = parse_models(models) if models else ["last-value", "ewma", "seasonal-delta-daily", "auto",
                                                     "arima", "kalman-llt", "holt-winters"]
        hist = max(2, int(history_s // step_s))
        # The controller fits five series per tick with one forecaster instance (rate, mean ISL, mean OSL,
        # prompt tokens/s, output tokens/s) and reads two horizons from each (interval, start-up + interval).
        series = [synthetic_rate(hist + ticks, step_s, seed) for seed in range(5)]
        series = [(t, v * scale) for (t, v), scale in zip(series, (1.0, 20.0, 4.0, 1200.0, 200.0), strict=True)]
        table = Table(title=f"fit+forecast latency: {hist} points of {step_s:g} s, horizons {step_s:g} s and "
                            f"{horizon_s:g} s, {ticks} ticks", title_justify="left")
        for col in ("model", "series p50 ms", "series p95 ms", "tick p50 ms", "tick p95 ms", "tick max ms",
                    "first tick ms"):
            table.add_column(col, justify="left" if col == "model" else "right")
        for name in names:
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
            ms, tk = np.asarray(per_series), np.asarray(per_tick)
            table.add_row(name, f"{np.percentile(ms, 50):.2f}", f"{np.percentile(ms, 95):.2f}",
                          f"{np.percentile(tk, 50):.2f}", f"{np.percentile(tk, 95):.2f}", f"{tk.max():.1f}",
                          f"{tk[0]:.1f}")
        console.print(table)
