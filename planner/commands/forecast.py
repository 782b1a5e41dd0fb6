"""`planner forecast eval`: rolling-origin evaluation of forecasters on a trace or series file."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from planner.commands.args import parse_models, seconds
from planner.commands.console import out_console
from planner.errors import UserError

TARGETS = ("rate", "isl", "osl")
DAY_S = 86_400.0


@contextmanager
def model_progress(console: Console) -> Iterator[Callable[[str, int], Callable[[], None]]]:
    """Yields ``start(label, total) -> advance``: one transient bar per model, shown from the first start."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    bar = Progress(*columns, console=console, transient=True)

    def start(label: str, total: int) -> Callable[[], None]:
        if not bar.live.is_started:
            bar.start()
        task = bar.add_task(label, total=total)
        return lambda: bar.advance(task)

    try:
        yield start
    finally:
        if bar.live.is_started:
            bar.stop()


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


YEAR_S = 366 * DAY_S


def _check(step_s: float, horizon_s: float, history_s: float, warmup_s: float | None, stride: int,
           target: str) -> None:
    seconds("--step-s", step_s, least=0.1, most=DAY_S)  # a finer bin than 0.1 s counts no rate
    seconds("--horizon-s", horizon_s)
    seconds("--history-s", history_s, most=YEAR_S)
    seconds("--warmup-s", warmup_s, zero=True, most=YEAR_S)
    if stride < 1:
        raise UserError(f"--stride: {stride} must be >= 1")
    if target not in (*TARGETS, "all"):
        raise UserError(f"--target: {target!r}; allowed: {', '.join(TARGETS)}, all")


def register(app: typer.Typer) -> None:
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
        from planner.forecast.evaluate import evaluate_series
        from planner.sim.traces.series import load_eval_series

        console = out_console()
        _check(step_s, horizon_s, history_s, warmup_s, stride, target)
        names = parse_models(models)
        ev = load_eval_series(series, fmt, step_s, column)
        if ev.step_s != step_s and fmt == "servegen":
            console.print(f"[dim]servegen windows are {ev.step_s:g} s; using them as given (--step-s {step_s:g} "
                          "ignored)")
        data, step = ev.data, ev.step_s
        targets = [t for t in TARGETS if t in data] if target == "all" else [target]
        if target not in ("rate", "all") and target not in data:
            raise UserError(f"--target {target}: format {fmt} has only a request rate")
        span = float(data["time_s"][-1] - data["time_s"][0])
        warm = min(2 * DAY_S, span / 4) if warmup_s is None else warmup_s
        console.print(f"{ev.description}; horizon {horizon_s:g} s ({math.ceil(horizon_s / step - 1e-9)} steps), "
                      f"history {history_s:g} s, warm-up {warm:g} s")
        report: dict[str, object] = {"series": str(series), "format": fmt, "step_s": step, "horizon_s": horizon_s,
                                     "history_s": history_s, "warmup_s": warm}
        per_target = {}
        for tgt in targets:
            with model_progress(console) as progress:
                res = evaluate_series(data["time_s"], data[tgt], names, step, horizon_s, history_s, warm, stride,
                                      tgt, time.perf_counter, progress)
            render_table(console, f"{series.name} - {tgt} - horizon {horizon_s:g} s", res)
            per_target[tgt] = {"models": res}
        report["models"] = per_target[targets[0]]["models"]
        if len(targets) > 1:
            report["targets"] = per_target
        if out is not None:
            out.write_text(json.dumps(report, indent=2) + "\n")
            console.print(f"wrote {out}")
