"""`planner backtest --fleet`: every policy of a fleet on its own trace, under one GPU budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from planner.commands.progress import phase_progress
from planner.errors import UserError


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


def fleet_backtest(fleet_path: Path, given: list[str], out: Path, *, format: str, columns: dict[str, str] | None,
                   rate_scale: float, scale_mode: str, seed: int, start_s: float | None, duration_s: float | None,
                   startup_s: float | None, kill: bool, no_plots: bool) -> dict:
    from planner.fleet_file import load_fleet
    from planner.sim.evaluate.fleet_backtest import fleet_markdown, run_fleet_backtest
    from planner.sim.traces.loaders import load_requests

    console = Console()
    fleet = load_fleet(fleet_path)
    files = trace_files(given, fleet.names())
    traces = {}
    for i, (name, path) in enumerate(files.items()):
        try:
            traces[name] = load_requests(path, format, columns=columns, rate_scale=rate_scale, scale_mode=scale_mode,
                                         seed=seed + i, start_s=start_s, duration_s=duration_s)
        except UserError as exc:
            raise UserError(f"--trace {name}={path}: {exc}") from None
        console.print(f"{name}: {len(traces[name]):,} requests over {traces[name].duration_s / 60:.1f} min")
    t0 = time.perf_counter()
    with phase_progress(console) as progress:
        result = run_fleet_backtest(fleet, traces, startup_s=startup_s, kill=kill, progress=progress)
    report = result.report
    report["timings_s"] = {"total": round(time.perf_counter() - t0, 2)}
    report["sim"] = {"kill": kill, "seed": seed, "format": format, "rate_scale": rate_scale, "scale_mode": scale_mode,
                     "startup_s": startup_s}
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=_jsonable))
    md = fleet_markdown(report)
    (out / "report.md").write_text(md)
    console.print(md, markup=False, highlight=False)
    console.print(f"wrote {out / 'report.json'}\nwrote {out / 'report.md'}")
    return report


def _jsonable(value: object) -> object:
    return str(value)
