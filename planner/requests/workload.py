"""The stated workload as one steady load: mean ISL, mean OSL and a request rate.

A rate is what the what-if sizing (``planner plan``) takes. Given ``concurrency`` C instead, Little's law
over the decode time at the ITL target gives ``rate = C / (OSL x ITL)``: the decode pool then holds C
sequences at once, and the prefill pool is sized for the highest rate C clients reach while every token
meets the ITL target (worked example: C = 64, OSL 200, ITL 40 ms -> 64 / 8 s = 8 req/s). A trace gives its
mean rate, mean ISL and mean OSL; its busiest minute is kept to set the pools' ceilings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import UserError
from planner.requests.spec import SLA, FieldError, Workload

PEAK_WINDOW_S = 60.0


@dataclass(frozen=True)
class SteadyLoad:
    isl: int
    osl: int
    rate_rps: float
    source: str  # how the numbers were obtained, for the status and the report
    peak_rate_rps: float  # the busiest PEAK_WINDOW_S of a trace; the rate itself otherwise


def from_concurrency(concurrency: int, osl: int, itl_ms: float) -> float:
    return concurrency / (osl * itl_ms / 1e3)


def from_trace(workload: Workload) -> SteadyLoad:
    from planner.sim.traces.loaders import load_requests

    ref = workload.trace
    assert ref is not None
    try:
        trace = load_requests(ref.path, ref.format, columns=ref.columns, start_s=ref.start_s,
                              duration_s=ref.duration_s)
    except UserError as exc:
        raise FieldError("workload.trace", str(exc)) from None
    if len(trace) < 2 or trace.duration_s <= 0:
        raise FieldError("workload.trace", f"{ref.path}: {len(trace)} requests over {trace.duration_s:g} s; need "
                         "at least two requests spread over time to derive a rate")
    rate = len(trace) / trace.duration_s
    windows = np.floor(trace.arrival_s / PEAK_WINDOW_S).astype(np.int64)
    peak = float(np.bincount(windows).max()) / PEAK_WINDOW_S if trace.duration_s >= PEAK_WINDOW_S else rate
    return SteadyLoad(max(1, round(float(trace.isl.mean()))), max(1, round(float(trace.osl.mean()))), rate,
                      f"trace {ref.path} ({len(trace):,} requests over {trace.duration_s:,.0f} s)", max(peak, rate))


def check_readable(workload: Workload) -> None:
    """The trace the run will read, read now (a request's error is a 422, not a Failed run); a ServeGen rate
    file is only parsed: synthesising its arrivals (up to millions) is the run's work, not the submit's."""
    from planner.sim.traces.loaders import load_rate_windows

    ref = workload.trace
    assert ref is not None
    if ref.format != "servegen":
        from_trace(workload)
        return
    try:
        load_rate_windows(ref.path)
    except UserError as exc:
        raise FieldError("workload.trace", str(exc)) from None


def steady_load(workload: Workload, sla: SLA) -> SteadyLoad:
    if workload.trace is not None:
        return from_trace(workload)
    assert workload.isl is not None and workload.osl is not None
    if workload.request_rate is not None:
        rate, source = workload.request_rate, "stated request_rate"
    else:
        assert workload.concurrency is not None
        rate = from_concurrency(workload.concurrency, workload.osl, sla.itl_ms)
        source = (f"concurrency {workload.concurrency} / (OSL {workload.osl} x ITL {sla.itl_ms:g} ms) "
                  "(Little's law over the decode time)")
    return SteadyLoad(workload.isl, workload.osl, rate, source, rate)
