"""`planner bench sim`: simulated requests per second of the cluster simulator (goal >= 50,000 on 2 cores)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from rich.console import Console

from planner.catalog import shipped_profile, traces_dir
from planner.errors import UserError
from planner.policy_file import PolicyFile
from planner.profile import Profile, load_profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.evaluate.backtest import fluid_initial
from planner.sim.traces.loaders import load_requests
from planner.sim.traces.records import RequestTrace
from planner.sim.traces.series import minute_counts
from planner.types import Mode

DEFAULT_TRACE = traces_dir() / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
DEFAULT_PROFILE = shipped_profile("h200/qwen3-32b.json")
MODES = tuple(Mode)


def peak_sizes(tr: RequestTrace, prof: Profile, mode: str) -> dict[str, int]:
    """Pool sizes for the trace's busiest minute, so the run is a realistic (not overloaded) cluster."""
    pools = {p.value: {"max_replicas": 10_000} for p in Mode(mode).pools}
    pol = PolicyFile.model_validate({"name": "bench", "mode": mode, "profile": "-", "pools": pools})
    peak_minute = float(np.argmax(minute_counts(tr)) * 60.0)
    peak = tr.window(peak_minute, peak_minute + 60.0)
    peak = RequestTrace(peak.arrival_s - peak_minute, peak.isl, peak.osl)
    return fluid_initial(peak, prof, pol, 60.0)


def run(console: Console, trace: Path, rate_scale: float, profile: Path, mode: str, repeat: int) -> None:
    if mode not in MODES:
        raise UserError(f"mode: {mode!r}; allowed: {', '.join(MODES)}", key="mode")
    prof = load_profile(profile)
    tr = load_requests(trace, "azure", rate_scale=rate_scale)
    sizes = peak_sizes(tr, prof, mode)
    best = best_cpu = float("inf")
    for _ in range(max(1, repeat)):
        c = Cluster(tr, prof, SimConfig(mode=Mode(mode)), sizes)
        t0, c0 = time.perf_counter(), time.process_time()
        c.run_until(float("inf"))
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    r = c.results()
    # CPU time too: on a shared machine wall time includes other processes' share of the cores
    console.print(f"sim {mode}: {len(tr):,} requests (Azure conv x{rate_scale:g}), sizes {sizes}: "
                  f"best of {max(1, repeat)}: {best:.2f} s wall -> {len(tr) / best:,.0f} simulated requests/s "
                  f"({len(tr) / best_cpu:,.0f} per CPU-second); "
                  f"TTFT p95 {np.nanpercentile(r['ttft_s'], 95) * 1e3:.0f} ms, "
                  f"ITL p95 {np.nanpercentile(r['itl_mean_s'], 95) * 1e3:.1f} ms")
