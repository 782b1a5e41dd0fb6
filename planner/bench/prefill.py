"""`planner bench prefill`: the prefill sizing model against the simulator at fixed pool sizes.

Why: the model's prefill queue serves one prompt at a time per replica (M/G/c with the prompt's own prefill
time), while the engine, and the simulator, takes every queued prompt into one chunked iteration that pays its
fixed cost once. Where the fixed cost is a large share of a prompt (a small model, short prompts) the pool serves
more than the model allows, and the model's utilisation ceiling keeps it a replica or more above what meets the
SLA (README, "Prefill's queue on a fast engine with short prompts"). This replays fixed prefill pools under
Poisson arrivals with exponentially distributed prompt lengths (the model's own assumption when no mix is known,
so what differs is the queue alone) and prints the simulated TTFT at the SLA percentile beside the model's
prediction (no calibration factor), and the utilisation of the model's one-prompt queue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from planner.catalog import example_policy, shipped_profile
from planner.decide.capacity import Load, prefill_ttft_ms, size_decode
from planner.decide.queueing import MAX_UTILISATION
from planner.decide.sizing_model import SizingModel
from planner.perf.engine import EngineModel
from planner.policy_file import load_policy
from planner.profile import load_profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.traces.records import RequestTrace

DEFAULT_PROFILE = shipped_profile("h200/qwen3-8b.json")
DEFAULT_POLICY = example_policy()
OSL_TOKENS = 20  # short outputs: decode stays light and the TTFT is prefill's
MAX_ISL_TOKENS = 32_000  # the exponential's far tail cut (one prompt in ~10^12 at a mean of 1,150)


@dataclass(frozen=True)
class Point:
    rate_rps: float
    replicas: int
    requests: int
    simulated_ms: float  # TTFT at the SLA percentile, after the warm-up
    predicted_ms: float  # the sizing model's (inf: its queue is unstable)
    utilisation: float  # of the model's one-prompt queue: rate x prefill time of the mean prompt / replicas
    percentile: float  # the SLA's, which both TTFTs are at

    @property
    def ratio(self) -> float:
        """predicted / simulated: above 1 the model is pessimistic."""
        return self.predicted_ms / self.simulated_ms if self.simulated_ms > 0 else math.nan


def poisson_trace(rate_rps: float, isl_mean: float, duration_s: float, seed: int) -> RequestTrace:
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate_rps * duration_s))
    arrival = np.sort(rng.uniform(0.0, duration_s, n))
    isl = np.clip(rng.exponential(isl_mean, n), 1, MAX_ISL_TOKENS).astype(np.int64)
    return RequestTrace(arrival, isl, np.full(n, OSL_TOKENS, dtype=np.int64), "poisson")


def measure(profile: Path, policy: Path, isl_mean: float, rates: Sequence[float], replicas: Sequence[int],
            duration_s: float, warmup_s: float, seed: int) -> list[Point]:
    pol = load_policy(policy)
    prof = load_profile(profile)
    model = SizingModel.build(pol, prof)
    engine: EngineModel = model.engine
    percentile = pol.sla.percentile
    out = []
    for rate in rates:
        trace = poisson_trace(rate, isl_mean, duration_s, seed)
        load = Load(rate, isl_mean, OSL_TOKENS)
        decode = 2 * max(1, size_decode(model, load).replicas)  # never the bottleneck
        for c in replicas:
            cluster = Cluster(trace, prof, SimConfig(sla_percentile=percentile), {"prefill": c, "decode": decode})
            cluster.run_until(float("inf"))
            r = cluster.results()
            scored = r["arrival_s"] >= warmup_s
            ttft = r["ttft_s"][scored]
            ttft = np.where(r["failed"][scored], np.inf, ttft)
            out.append(Point(rate, c, int(scored.sum()), float(np.percentile(ttft, percentile)) * 1e3,
                             prefill_ttft_ms(model, load, c), rate * engine.prefill_s(isl_mean) / c, percentile))
    return out


def run(console: Console, profile: Path | None, policy: Path | None, isl_mean: float, rates: Sequence[float],
        replicas: Sequence[int], duration_s: float, warmup_s: float, seed: int) -> list[Point]:
    prof, pol = profile or DEFAULT_PROFILE, policy or DEFAULT_POLICY
    points = measure(prof, pol, isl_mean, rates, replicas, duration_s, warmup_s, seed)
    table = Table(title=f"Prefill pools at fixed sizes: simulated vs predicted TTFT ({prof.name}, prompts "
                        f"exponential, mean {isl_mean:,.0f} tokens, Poisson arrivals, {duration_s:,.0f} s, "
                        f"the first {warmup_s:,.0f} s unscored)")
    for col in ("req/s", "replicas", "requests", "simulated ms", "predicted ms", "predicted / simulated",
                "one-prompt utilisation"):
        table.add_column(col, justify="right")
    for p in points:
        util = f"{p.utilisation:.2f}" + (" (over the ceiling)" if p.utilisation >= MAX_UTILISATION else "")
        table.add_row(f"{p.rate_rps:g}", str(p.replicas), f"{p.requests:,}", _ms(p.simulated_ms),
                      _ms(p.predicted_ms), f"{p.ratio:.2f}" if math.isfinite(p.ratio) else "-", util)
    console.print(table)
    console.print(f"TTFT at p{points[0].percentile:g}; the model's ceiling on its one-prompt queue's "
                  f"utilisation is {MAX_UTILISATION:g} (planner/decide/queueing.py).")
    return points


def as_json(points: Sequence[Point]) -> list[dict]:
    return [{**asdict(p), "ratio": p.ratio} for p in points]


def _ms(v: float) -> str:
    return f"{v:,.0f}" if math.isfinite(v) else "unstable"
