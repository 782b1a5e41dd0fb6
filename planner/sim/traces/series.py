"""Per-step series from trace files: binning per-request traces and reading plain series CSVs.

``planner forecast eval`` scores forecasters on these series; the demo and ``bench sim`` read a trace's
busiest minute from ``minute_counts``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.errors import UserError
from planner.sim.traces.loaders import load_rate_windows, load_requests, open_data_file
from planner.sim.traces.records import RequestTrace

EVAL_FORMATS = ("azure", "mooncake", "servegen", "csv")


def minute_counts(trace: RequestTrace) -> np.ndarray:
    """Requests per whole minute of the trace, from its start (the last minute may be partial)."""
    return np.histogram(trace.arrival_s, bins=np.arange(0.0, trace.duration_s + 60.0, 60.0))[0]


def bin_requests(arrival_s: np.ndarray, isl: np.ndarray, osl: np.ndarray, step_s: float) -> dict[str, np.ndarray]:
    """Per-request rows -> per-step request rate and mean ISL/OSL (NaN where a step had no request).

    The last, partial step is dropped: its rate would read low only because it was cut short.
    """
    span = float(arrival_s[-1]) if len(arrival_s) else 0.0
    n = int(span // step_s)
    if n < 2:
        raise UserError(f"step_s {step_s:g}: the trace spans {span:g} s, fewer than two steps", key="step_s")
    idx = (arrival_s // step_s).astype(np.int64)
    keep = idx < n
    idx = idx[keep]
    count = np.bincount(idx, minlength=n).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        isl_mean = np.bincount(idx, weights=isl[keep], minlength=n) / count
        osl_mean = np.bincount(idx, weights=osl[keep], minlength=n) / count
    return {"time_s": np.arange(n) * step_s, "rate": count / step_s, "isl": isl_mean, "osl": osl_mean}


def _number(path: Path, line: int, column: str, cell: list[str], empty_is_nan: bool) -> float:
    try:
        if empty_is_nan and not cell[0].strip():
            return math.nan  # empty cell = missing sample
        return float(cell[0])
    except (ValueError, IndexError):
        raise UserError(f"{path}:{line}: column {column!r} value {cell} is not a number") from None


def read_series_csv(path: Path, column: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    """A plain series CSV: first column time in seconds, then value columns (``column`` picks one)."""
    with open_data_file(path, "series file") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in (next(reader, None) or [])]
        if len(header) < 2:
            raise UserError(f"{path}:1: expected a header 'time_s,<value column>[,...]', got {header}")
        col = column or header[1]
        if col not in header[1:]:
            raise UserError(f"column: {col!r} is not a value column of {path}; columns: {', '.join(header[1:])}",
                            key="column")
        ci = header.index(col)
        times, vals = [], []
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            times.append(_number(path, line, header[0], row[:1], empty_is_nan=False))
            vals.append(_number(path, line, col, row[ci:ci + 1], empty_is_nan=True))
    if len(times) < 3:
        raise UserError(f"{path}: {len(times)} rows; need at least 3")
    return np.asarray(times), np.asarray(vals), col


@dataclass(frozen=True)
class EvalSeries:
    """{"time_s": ..., target: values}, the step the values are on, and a one-line description."""

    data: dict[str, np.ndarray]
    step_s: float
    description: str


def load_eval_series(path: Path, fmt: str, step_s: float, column: str | None) -> EvalSeries:
    """A series to evaluate forecasters on; per-request traces are binned into ``step_s`` steps.

    ServeGen files are already per-window rates: their own window length is the step (``step_s`` unused).
    """
    if fmt not in EVAL_FORMATS:
        raise UserError(f"format: {fmt!r}; allowed: {', '.join(EVAL_FORMATS)}", key="format")
    if not path.exists():
        raise UserError(f"series: {path} not found", key="series")
    if fmt == "servegen":
        w = load_rate_windows(path)
        step = float(np.median(w.window_s))
        return EvalSeries({"time_s": w.window_start_s, "rate": w.rate_rps}, step,
                          f"{path.name}: {len(w)} windows of {step:g} s")
    if fmt == "csv":
        t, v, col = read_series_csv(path, column)
        step = float(np.median(np.diff(t)))
        return EvalSeries({"time_s": t, "rate": v}, step, f"{path.name}: column {col}, {len(t)} rows, step {step:g} s")
    trace = load_requests(path, fmt)
    series = bin_requests(trace.arrival_s, trace.isl.astype(np.float64), trace.osl.astype(np.float64), step_s)
    return EvalSeries(series, step_s,
                      f"{path.name}: {len(trace)} requests binned into {len(series['rate'])} steps of {step_s:g} s")
