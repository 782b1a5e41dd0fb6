"""`planner backtest --fleet`: every policy of a fleet on its own trace (``--trace POLICY=FILE`` each, or one csv/jsonl
trace split by its model column, ``--columns ...,model=COL``, whose values are the policies' names), under one
GPU budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from planner.commands.oversized import fit_oversized
from planner.commands.progress import phase_progress
from planner.errors import UserError
from planner.sim.traces.records import RequestTrace


def trace_files(given: list[str], names: tuple[str, ...]) -> dict[str, Path]:
    """--trace POLICY=FILE, once per policy of the fleet."""
    out: dict[str, Path] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--trace {item!r}: with --fleet, expected POLICY=FILE (one per policy: "
                            f"{', '.join(names)})")
        if name not in names:
            raise UserError(f"--trace {item!r}: no policy {name!r} in the fleet; allowed: {', '.join(names)}")
        if name in out:
            raise UserError(f"--trace {item!r}: policy {name!r} already has a trace ({out[name]})")
        out[name] = Path(path)
    missing = [n for n in names if n not in out]
    if missing:
        raise UserError(f"--trace: no trace for {', '.join(missing)} (give --trace POLICY=FILE for each policy)")
    return out


def model_values(path: Path, format: str, column: str) -> list[str]:
    """The model column of a csv/jsonl trace, one value per request in file order."""
    import csv

    from planner.sim.traces.loaders import open_data_file

    with open_data_file(path, "trace file") as fh:
        if format == "csv":
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            if column not in header:
                raise UserError(f"--columns model={column}: {path} has no column {column!r}; header has {header}")
            i = header.index(column)
            return [row[i].strip() if len(row) > i else "" for row in reader if row and any(c.strip() for c in row)]
        values = []
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    values.append(str(json.loads(line)[column]))
                except (ValueError, KeyError, TypeError):
                    raise UserError(f"--columns model={column}: {path}:{n}: no field {column!r}") from None
        return values


def split_by_model(path: Path, format: str, columns: dict[str, str], names: tuple[str, ...]) -> dict[str, RequestTrace]:
    """One csv/jsonl trace with a model column (``--columns ...,model=COL``), split per policy by name; every
    model's arrivals keep the file's time origin, so the models' loads line up as they did."""
    from planner.sim.traces.loaders import load_requests

    if format not in ("csv", "jsonl"):
        raise UserError(f"--columns model=...: a model column needs --format csv or jsonl, not {format}")
    cols = {k: v for k, v in columns.items() if k != "model"}
    whole = load_requests(path, format, columns=cols)
    models = np.asarray(model_values(path, format, columns["model"]))
    if len(models) != len(whole):
        raise UserError(f"--trace {path}: {len(models)} model values for {len(whole)} requests")
    missing = [n for n in names if not (models == n).any()]
    if missing:
        seen = ", ".join(sorted(set(models.tolist()))[:10])
        raise UserError(f"--trace {path}: no request of model {', '.join(missing)} (the fleet's policy names); the "
                        f"file's models: {seen}")
    return {n: RequestTrace(whole.arrival_s[models == n], whole.isl[models == n], whole.osl[models == n],
                            f"{path} (model {n})") for n in names}


def fleet_backtest(fleet_path: Path, given: list[str], out: Path, *, format: str, columns: dict[str, str] | None,
                   rate_scale: float, scale_mode: str, seed: int, start_s: float | None, duration_s: float | None,
                   startup_s: float | None, kill: bool, no_plots: bool, oversized: str = "error") -> dict:
    from planner.fleet_file import load_fleet
    from planner.sim.evaluate.fleet_backtest import run_fleet_backtest
    from planner.sim.evaluate.fleet_report import write_fleet_report

    console = Console()
    fleet = load_fleet(fleet_path)
    if columns and "model" in columns:
        if len(given) != 1 or "=" in given[0] and not Path(given[0]).exists():
            raise UserError("--trace: with --columns model=COL, give one trace file (it is split by model)")
        raw = split_by_model(Path(given[0]), format, columns, fleet.names())
        traces = {n: _cut(t, rate_scale, scale_mode, seed + i, start_s, duration_s) for i, (n, t) in enumerate(raw.items())}
    else:
        traces = _load_each(trace_files(given, fleet.names()), format, columns, rate_scale, scale_mode, seed, start_s,
                            duration_s)
    fitted: dict[str, dict] = {}
    for m in fleet.members:  # each model's requests against its own profile (--oversized)
        fitted[m.name] = {}
        traces[m.name] = fit_oversized(console, traces[m.name], m.profile, oversized, fitted[m.name], m.name)
    for name, tr in traces.items():
        if len(tr) == 0:
            raise UserError(f"--trace: no request of {name} in the chosen window")
        console.print(f"{name}: {len(tr):,} requests over {tr.duration_s / 60:.1f} min")
    t0 = time.perf_counter()
    with phase_progress(console) as progress:
        result = run_fleet_backtest(fleet, traces, startup_s=startup_s, kill=kill, progress=progress)
    report = result.report
    report["timings_s"] = {"total": round(time.perf_counter() - t0, 2)}
    report["sim"] = {"kill": kill, "seed": seed, "format": format, "rate_scale": rate_scale, "scale_mode": scale_mode,
                     "startup_s": startup_s,
                     "oversized": {n: f["oversized"] for n, f in fitted.items() if "oversized" in f}}
    md, paths = write_fleet_report(out, result, fleet, traces, not no_plots)
    console.print(md, markup=False, highlight=False)
    console.print("\n".join(f"wrote {p}" for p in paths))
    return report


def _load_each(files: dict[str, Path], format: str, columns: dict[str, str] | None, rate_scale: float,
               scale_mode: str, seed: int, start_s: float | None, duration_s: float | None) -> dict[str, RequestTrace]:
    from planner.sim.traces.loaders import load_requests

    traces = {}
    for i, (name, path) in enumerate(files.items()):
        try:
            traces[name] = load_requests(path, format, columns=columns, rate_scale=rate_scale, scale_mode=scale_mode,
                                         seed=seed + i, start_s=start_s, duration_s=duration_s)
        except UserError as exc:
            raise UserError(f"--trace {name}={path}: {exc}") from None
    return traces


def _cut(trace: RequestTrace, rate_scale: float, scale_mode: str, seed: int, start_s: float | None,
         duration_s: float | None) -> RequestTrace:
    """As load_requests cuts and scales a file's trace: [start_s, start_s + duration_s) of trace time, then the rate."""
    from planner.sim.traces.loaders import scale_rate

    if start_s is not None or duration_s is not None:
        lo = start_s or 0.0
        hi = lo + duration_s if duration_s is not None else float("inf")
        cut = trace.window(lo, hi)
        trace = RequestTrace(cut.arrival_s - lo, cut.isl, cut.osl, cut.source)
    return scale_rate(trace, rate_scale, scale_mode, seed)
