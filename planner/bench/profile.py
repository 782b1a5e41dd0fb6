"""`planner bench profile`: full default sweep time and the analytical model's error against real H200
measurements."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from rich.console import Console

from planner.catalog import load_hardware, load_model
from planner.profiler.accuracy import default_measurements, score_measurements
from planner.profiler.analytical import profile_analytical
from planner.profiler.grids import DEFAULT_TP, SweepRequest


def run(console: Console, repeat: int, measurements: Path | None) -> None:
    spec, hw = load_model("qwen3-32b"), load_hardware("h200")
    req = SweepRequest(model="qwen3-32b", gpu="h200", tp=DEFAULT_TP, isl=4000, osl=500, ttft_ms=500, itl_ms=30)
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        profile_analytical(spec, hw, req)
        times.append(time.perf_counter() - start)
    console.print(f"analytical sweep (qwen3-32b, h200, TP 1,2,4,8, default grids): median "
                  f"{statistics.median(times) * 1e3:.1f} ms, worst {max(times) * 1e3:.1f} ms over {len(times)} runs")
    path = measurements or default_measurements()
    if path is None or not Path(path).exists():
        console.print("no measurement file found (profiles/measurements/h200/qwen3-8b.json); skipping accuracy")
        return
    score = score_measurements(Path(path))
    for stage, errs in score.items():
        console.print(f"{stage:>7} vs {Path(path).name}: {len(errs)} points, median |error| "
                      f"{statistics.median(errs):.1%}, worst {max(errs):.1%}")
