"""The load `planner up` replays: a slice of a request trace, time-compressed and rate-scaled."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.catalog import data_dir
from planner.errors import UserError
from planner.sim.traces.loaders import load_requests, scale_rate
from planner.sim.traces.records import RequestTrace

# The embedded Azure 2023 conversation trace (profiles/traces/azure2023/, the code trace beside it).
CONV_CANDIDATES = (Path("traces") / "azure2023" / "AzureLLMInferenceTrace_conv.csv",)
# Ten trace minutes per wall minute: the conversation trace's own swings show within one load phase.
COMPRESS = 10.0
# The load ramps up over this share of its phase (a request at t kept with probability t / ramp), as traffic
# grows rather than stepping from nothing to its full rate: the controller reads a 6 s window and a replica
# takes seconds to start, so a step would queue its first seconds on the floor replica whatever it decides.
RAMP_SHARE = 0.5


def default_trace_path() -> Path:
    """The embedded Azure conversation trace (the first candidate that exists under profiles/)."""
    root = data_dir()
    for rel in CONV_CANDIDATES:
        if (root / rel).is_file():
            return root / rel
    raise UserError(f"trace: the embedded Azure conversation trace is not under {root} (looked for "
                    f"{', '.join(str(r) for r in CONV_CANDIDATES)}); give a trace file", key="trace")


def load_schedule(path: Path, load_s: float, rate_scale: float, compress: float = COMPRESS,
                  ramp_share: float = RAMP_SHARE) -> RequestTrace:
    """Requests to send in the first ``load_s`` wall seconds: the trace's first ``load_s * compress`` seconds,
    squeezed ``compress`` times in time, then their rate times ``rate_scale`` (superposed copies; below 1 a
    seeded random share), ramped up over the first ``ramp_share`` of the phase."""
    if not path.is_file():
        raise UserError(f"trace {path}: no such file (an Azure 2023 CSV: TIMESTAMP, ContextTokens, "
                        "GeneratedTokens)", key="trace")
    trace = load_requests(path, "azure", start_s=0.0, duration_s=load_s * compress)
    if len(trace) == 0:
        raise UserError(f"trace {path}: no request in its first {load_s * compress:g} s", key="trace")
    squeezed = scale_rate(trace, compress, mode="compress")
    scaled = scale_rate(squeezed, rate_scale, mode="superpose", seed=0)
    return ramped(scaled, load_s * ramp_share)


def ramped(trace: RequestTrace, ramp_s: float, seed: int = 0) -> RequestTrace:
    """``trace`` with a request arriving at t < ``ramp_s`` kept with probability t / ramp_s (seeded)."""
    if ramp_s <= 0:
        return trace
    draw = np.random.default_rng(seed).random(len(trace))
    keep = (trace.arrival_s >= ramp_s) | (draw < trace.arrival_s / ramp_s)
    return RequestTrace(trace.arrival_s[keep], trace.isl[keep], trace.osl[keep], trace.source,
                        f"{trace.notes}; ramped up over {ramp_s:g} s" if trace.notes else f"ramped up over {ramp_s:g} s")
