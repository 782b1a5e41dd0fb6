"""Loading request traces: the public trace formats, cutting to a window, and rate scaling.

Formats (``fmt``):
- ``azure``: Azure LLM inference 2023 CSV, ``TIMESTAMP, ContextTokens, GeneratedTokens`` (wall clock, no zone).
- ``mooncake``: JSONL with ``timestamp`` (ms), ``input_length``, ``output_length`` (``hash_ids`` ignored).
- ``csv`` / ``jsonl``: generic, with ``columns={"arrival": name, "isl": name, "osl": name}`` and an optional
  ``"time_unit": "s" | "ms" | "us" | "datetime"``.
- ``servegen``: aggregate rates per window (``window_start_s, window_s, total_rate_rps, ...``); arrivals are
  synthesised (Poisson) with lengths from :data:`~planner.sim.traces.synthetic.DEFAULT_ISL` /
  :data:`~planner.sim.traces.synthetic.DEFAULT_OSL` (Azure-conv-like).

Bad rows raise :class:`UserError` naming file, line, column and value. Rows must be sorted by arrival time:
an unsorted file is an error, not silently re-sorted, because it usually means the wrong column was mapped.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import numpy as np

from planner.errors import UserError, not_utf8
from planner.sim.traces.records import RateWindows, RequestTrace
from planner.sim.traces.synthetic import synthesise_from_rates
from planner.types import MAX_TOKENS

FORMATS = ("azure", "mooncake", "csv", "jsonl", "servegen")
SCALE_MODES = ("superpose", "compress")
# Superposed copies are shifted by a random offset in [0, SUPERPOSE_SHIFT_S): enough to break the
# lock-step of identical copies, small enough to keep the trace's minute-scale load shape (peak/mean).
SUPERPOSE_SHIFT_S = 60.0
MAX_SYNTH_REQUESTS = 20_000_000  # a ServeGen file spans 14 days; synthesising all of it would not fit memory


# ------------------------------------------------------------------------------------------------ parsing
def _num(path: Path, line: int, column: str, text: object, integer: bool) -> float:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{path}:{line}: column {column!r} value {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"{path}:{line}: column {column!r} value {text!r} is not finite")
    if value < 0:
        raise UserError(f"{path}:{line}: column {column!r} value {text!r} is negative; must be >= 0")
    if integer and value != int(value):
        raise UserError(f"{path}:{line}: column {column!r} value {text!r} is not a whole number of tokens")
    if integer and value > MAX_TOKENS:
        raise UserError(f"{path}:{line}: column {column!r} value {text!r} is more tokens than any model's context; "
                        f"at most {MAX_TOKENS:,}")
    return value


def _datetime_s(path: Path, line: int, column: str, text: str) -> float:
    t = text.strip()
    # Python's fromisoformat takes at most 6 fractional digits; Azure writes 7 (100 ns).
    if "." in t:
        head, frac = t.split(".", 1)
        t = f"{head}.{frac[:6]}"
    try:
        return datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise UserError(f"{path}:{line}: column {column!r} value {text!r} is not a timestamp "
                        f"(expected e.g. 2023-11-16 18:15:46.6805900)") from None


_UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def _finish(path: Path, lines: list[int], t: list[float], isl: list[float], osl: list[float],
            source: str) -> RequestTrace:
    if not t:
        raise UserError(f"{path}: no requests in the file")
    arr = np.asarray(t, dtype=np.float64)
    bad = np.nonzero(np.diff(arr) < 0)[0]
    if len(bad):
        i = int(bad[0]) + 1
        raise UserError(f"{path}:{lines[i]}: arrival time {float(arr[i])!r} is earlier than the previous row's "
                        f"{float(arr[i - 1])!r}; rows must be sorted by arrival time")
    isl_a = np.asarray(isl, dtype=np.int64)
    osl_a = np.asarray(osl, dtype=np.int64)
    zero = np.nonzero(isl_a < 1)[0]
    if len(zero):
        i = int(zero[0])
        raise UserError(f"{path}:{lines[i]}: input length {isl_a[i]} must be >= 1 token")
    return RequestTrace(arr - arr[0], isl_a, np.maximum(osl_a, 1), source)


class DataFile:
    """A CSV/JSONL data file read line by line (``with``, then iterate): a byte that is not UTF-8 is one line
    naming the file, not a decoding traceback from deep inside a reader."""

    def __init__(self, path: Path, fh: TextIO) -> None:
        self.path, self._fh = path, fh

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def __iter__(self) -> Iterator[str]:
        try:
            yield from self._fh
        except UnicodeDecodeError as exc:
            raise not_utf8(self.path, exc, whole_file=False) from None

    def read(self) -> str:
        try:
            return self._fh.read()
        except UnicodeDecodeError as exc:
            raise not_utf8(self.path, exc, whole_file=False) from None


def open_data_file(path: Path, what: str) -> DataFile:
    """Open a CSV/JSONL data file for reading; a missing or unreadable file is one line naming it."""
    try:
        return DataFile(path, path.open(newline="", encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read {what} ({exc.strerror})") from None


def _read_csv(path: Path, cols: dict[str, str], time_unit: str, source: str) -> RequestTrace:
    fh = open_data_file(path, "trace file")
    t: list[float] = []
    isl: list[float] = []
    osl: list[float] = []
    lines: list[int] = []
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise UserError(f"{path}: empty file")
        header = [h.strip() for h in header]
        idx = {}
        for key in ("arrival", "isl", "osl"):
            name = cols[key]
            if name not in header:
                raise UserError(f"{path}:1: missing column {name!r} ({key}); header has {header}")
            idx[key] = header.index(name)
        need = max(idx.values())
        ia, ii, io = idx["arrival"], idx["isl"], idx["osl"]
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                raise UserError(f"{path}:{line}: empty row")
            if len(row) <= need:
                raise UserError(f"{path}:{line}: {len(row)} fields, expected {len(header)} ({row!r})")
            if time_unit == "datetime":
                t.append(_datetime_s(path, line, cols["arrival"], row[ia]))
            else:
                t.append(_num(path, line, cols["arrival"], row[ia], False) * _UNIT_S[time_unit])
            isl.append(_num(path, line, cols["isl"], row[ii], True))
            osl.append(_num(path, line, cols["osl"], row[io], True))
            lines.append(line)
    return _finish(path, lines, t, isl, osl, source)


def _read_jsonl(path: Path, cols: dict[str, str], time_unit: str, source: str) -> RequestTrace:
    with open_data_file(path, "trace file") as fh:
        text = fh.read()
    t: list[float] = []
    isl: list[float] = []
    osl: list[float] = []
    lines: list[int] = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            raise UserError(f"{path}:{line}: empty row")
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{line}: not valid JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise UserError(f"{path}:{line}: expected a JSON object, got {type(rec).__name__}")
        for key in ("arrival", "isl", "osl"):
            if cols[key] not in rec:
                raise UserError(f"{path}:{line}: missing field {cols[key]!r} ({key})")
        if time_unit == "datetime":
            t.append(_datetime_s(path, line, cols["arrival"], str(rec[cols["arrival"]])))
        else:
            t.append(_num(path, line, cols["arrival"], rec[cols["arrival"]], False) * _UNIT_S[time_unit])
        isl.append(_num(path, line, cols["isl"], rec[cols["isl"]], True))
        osl.append(_num(path, line, cols["osl"], rec[cols["osl"]], True))
        lines.append(line)
    return _finish(path, lines, t, isl, osl, source)


def load_rate_windows(path: str | Path) -> RateWindows:
    """ServeGen-style aggregate rates: ``window_start_s, window_s, total_rate_rps`` (+ ignored columns)."""
    p = Path(path)
    with open_data_file(p, "rate file") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in (next(reader, None) or [])]
        if not header:
            raise UserError(f"{p}: empty file")
        cols = ("window_start_s", "window_s", "total_rate_rps")
        for c in cols:
            if c not in header:
                raise UserError(f"{p}:1: missing column {c!r}; header has {header}")
        ix = [header.index(c) for c in cols]
        rows: list[tuple[float, float, float]] = []
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                raise UserError(f"{p}:{line}: empty row")
            if len(row) <= max(ix):
                raise UserError(f"{p}:{line}: {len(row)} fields, expected {len(header)}")
            vals = tuple(_num(p, line, c, row[i], False) for c, i in zip(cols, ix, strict=True))
            if vals[1] <= 0:
                raise UserError(f"{p}:{line}: column 'window_s' value {row[ix[1]]!r} must be > 0")
            if rows and vals[0] < rows[-1][0]:
                raise UserError(f"{p}:{line}: window_start_s {vals[0]!r} is earlier than the previous row's "
                                f"{rows[-1][0]!r}; rows must be sorted")
            rows.append(vals)  # type: ignore[arg-type]
    if not rows:
        raise UserError(f"{p}: no rate windows in the file")
    a = np.asarray(rows, dtype=np.float64)
    return RateWindows(a[:, 0] - a[0, 0], a[:, 1], a[:, 2], str(p))


# ---------------------------------------------------------------------------------------------- scaling
def scale_rate(trace: RequestTrace, rate_scale: float, mode: str = "superpose", seed: int = 0) -> RequestTrace:
    """Multiply the arrival rate by ``rate_scale``.

    ``superpose``: K = floor(scale) copies plus a random share (scale - K) of one more copy, each shifted
    by a random offset in [0, SUPERPOSE_SHIFT_S) and wrapped around the trace span, so the span, the length
    distributions and the minute-scale load shape are kept. ``compress``: divide all times by the scale
    (the same requests, faster; the load shape is squeezed in time too).
    """
    if not math.isfinite(rate_scale) or rate_scale <= 0:
        raise UserError(f"rate_scale: {rate_scale!r} must be a finite number > 0", key="rate_scale")
    if mode not in SCALE_MODES:
        raise UserError(f"scale_mode: {mode!r} is not one of {', '.join(SCALE_MODES)}", key="scale_mode")
    if rate_scale == 1.0 or len(trace) == 0:
        return trace
    if mode == "compress":
        return RequestTrace(trace.arrival_s / rate_scale, trace.isl, trace.osl, trace.source,
                            _join(trace.notes, f"rate x{rate_scale:g} by compressing time"))
    rng = np.random.default_rng(seed)
    span = max(trace.duration_s, 1e-9)
    full = int(math.floor(rate_scale))
    frac = rate_scale - full
    ts, isls, osls = [], [], []
    for k in range(full + (1 if frac > 1e-12 else 0)):
        keep = slice(None) if k < full else rng.random(len(trace)) < frac
        shift = 0.0 if k == 0 else float(rng.random() * min(SUPERPOSE_SHIFT_S, span))
        ts.append(np.mod(trace.arrival_s[keep] + shift, span + 1e-9))
        isls.append(trace.isl[keep])
        osls.append(trace.osl[keep])
    t = np.concatenate(ts)
    order = np.argsort(t, kind="stable")
    note = (f"rate x{rate_scale:g} by superposing {full}{' + a ' + format(frac, '.2f') + ' share of one' if frac > 1e-12 else ''} "
            f"copies shifted by random offsets < {SUPERPOSE_SHIFT_S:g} s (wrapped; seed {seed})")
    return RequestTrace(t[order], np.concatenate(isls)[order], np.concatenate(osls)[order], trace.source,
                        _join(trace.notes, note))


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


# ---------------------------------------------------------------------------------------------- entry
def load_requests(path: str | Path, fmt: str = "azure", *, columns: dict[str, str] | None = None,
                  rate_scale: float = 1.0, scale_mode: str = "superpose", seed: int = 0,
                  start_s: float | None = None, duration_s: float | None = None) -> RequestTrace:
    """Load a trace, optionally cut to [start_s, start_s + duration_s) (trace time), then scale its rate."""
    p = Path(path)
    if fmt not in FORMATS:
        raise UserError(f"format: {fmt!r} is not a known trace format; allowed: {', '.join(FORMATS)}", key="format")
    if fmt == "azure":
        trace = _read_csv(p, {"arrival": "TIMESTAMP", "isl": "ContextTokens", "osl": "GeneratedTokens"},
                          "datetime", str(p))
    elif fmt == "mooncake":
        trace = _read_jsonl(p, {"arrival": "timestamp", "isl": "input_length", "osl": "output_length"}, "ms",
                            str(p))
    elif fmt == "servegen":
        windows = load_rate_windows(p)
        if start_s is not None or duration_s is not None:
            lo = start_s or 0.0
            hi = lo + duration_s if duration_s is not None else math.inf
            keep = (windows.window_start_s >= lo) & (windows.window_start_s < hi)
            windows = RateWindows(windows.window_start_s[keep] - lo, windows.window_s[keep],
                                  windows.rate_rps[keep], windows.source)
            start_s = duration_s = None
        synth_note = ""
        if scale_mode == "superpose" and rate_scale != 1.0 and math.isfinite(rate_scale) and rate_scale > 0:
            # Synthesised arrivals are Poisson at the window's rate, so superposing copies is scaling the rate
            # (and a x0.1 scale-down need not synthesise 10x the requests first). Bad scales fall through to
            # scale_rate's error; compress keeps its meaning (time squeezed after synthesis).
            windows = RateWindows(windows.window_start_s, windows.window_s, windows.rate_rps * rate_scale,
                                  windows.source)
            synth_note = f"rates x{rate_scale:g} before synthesis"
            rate_scale = 1.0
        expected = float(np.sum(windows.rate_rps * windows.window_s))
        if expected > MAX_SYNTH_REQUESTS:
            raise UserError(f"{p}: synthesising {expected:,.0f} requests exceeds {MAX_SYNTH_REQUESTS:,}; "
                            f"cut the span with start_s/duration_s", mentions=("start_s", "duration_s"))
        trace = synthesise_from_rates(windows, seed=seed)
        if synth_note:
            trace = RequestTrace(trace.arrival_s, trace.isl, trace.osl, trace.source, _join(trace.notes, synth_note))
    else:
        cols = dict(columns or {})
        unit = cols.pop("time_unit", "s")
        missing = [k for k in ("arrival", "isl", "osl") if k not in cols]
        unknown = sorted(set(cols) - {"arrival", "isl", "osl", "model"})
        if unknown:
            raise UserError(f"columns: unknown key {unknown[0]!r}; allowed: arrival, isl, osl, time_unit "
                            "(and model, for a fleet)", key="columns")
        if missing:
            raise UserError(f"columns: format {fmt} needs a mapping for {', '.join(missing)} "
                            f"(e.g. arrival=ts,isl=prompt_tokens,osl=output_tokens)", key="columns")
        if unit not in (*_UNIT_S, "datetime"):
            raise UserError(f"columns: time_unit {unit!r}; allowed: s, ms, us, datetime", key="columns")
        reader = _read_csv if fmt == "csv" else _read_jsonl
        trace = reader(p, cols, unit, str(p))
    if start_s is not None or duration_s is not None:
        lo = start_s or 0.0
        hi = lo + duration_s if duration_s is not None else math.inf
        cut = trace.window(lo, hi)
        trace = RequestTrace(cut.arrival_s - lo, cut.isl, cut.osl, cut.source,
                             _join(cut.notes, f"cut to trace time [{lo:g}, {hi:g}) s"))
    return scale_rate(trace, rate_scale, scale_mode, seed)

