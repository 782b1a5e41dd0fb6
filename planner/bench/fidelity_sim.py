"""The simulated side of the fidelity check: one replica per pool, a fixed fleet, the trace run to its end."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from planner.profile import Profile
from planner.sim.cluster.cluster import Cluster, SimConfig
from planner.sim.traces.records import RequestTrace
from planner.types import Mode


def simulate(trace: RequestTrace, profile: Profile, mode: Mode, chunk_tokens: int,
             **config: float) -> dict[str, np.ndarray]:
    """Per-request results of ``trace`` through planner/sim's cluster on one ready replica per pool."""
    sim_config = SimConfig(mode=mode, startup_s=0.0, chunk_tokens=chunk_tokens, **config)  # type: ignore[arg-type]
    cluster = Cluster(trace, profile, sim_config, {pool: 1 for pool in mode.pools})
    cluster.run_until(math.inf)
    cluster.fail_unfinished()
    return {**cluster.results(), "token_gaps_s": cluster.log.token_gaps_s()}


def resimulate(results_json: Path, chunk_tokens: int, **config: float) -> dict[str, dict[str, Any]]:
    """Simulate a recorded run (``planner bench fidelity --out``) again with the current model: per mode, the
    real and simulated p50/p95. The replayed requests and the measured profile come from the files."""
    from planner.bench.fidelity_load import percentiles

    body = json.loads(results_json.read_text())
    out: dict[str, dict[str, Any]] = {}
    for mode in body["modes"]:
        req = mode["per_request"]
        trace = RequestTrace(np.asarray(req["arrival_s"], dtype=float), np.asarray(req["isl"], dtype=np.int64),
                             np.asarray(req["osl"], dtype=np.int64), str(results_json))
        profile = Profile.model_validate_json(
            results_json.with_name(f"{results_json.stem}.{mode['mode']}.profile.json").read_text())
        sim = simulate(trace, profile, Mode(mode["mode"]), chunk_tokens, **{**mode.get("sim_config", {}), **config})
        figures = percentiles(sim["ttft_s"], sim["itl_mean_s"], sim["itl_max_s"], sim["token_gaps_s"])
        out[mode["mode"]] = {"real": mode["real"], "sim": figures}
    return out
