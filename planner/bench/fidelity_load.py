"""The fidelity check's workload: a slice of a public trace that a tiny CPU model can carry, and its replay
against a live OpenAI-compatible server (a vLLM server, or the router in front of a prefill/decode pair).

The slice keeps the trace's order, lengths and burstiness: consecutive requests from ``start_s`` on, their
arrival gaps scaled so the mean rate is ``rate_rps``, prompts cut to ``max_isl`` and outputs to ``max_osl``
(the tiny model's context is 4,096 tokens). Every prompt is a fresh list of random token ids, so no request
hits the prefix cache (or, disaggregated, another request's KV files).

Each request is measured the way the simulator defines its figures (planner/sim/cluster/request_log.py): TTFT = first
token received - request sent (the client's clock, so the API front end is inside it); ITL = the request's
mean gap, (last token - first token) / (output tokens - 1). Reported beside them, not in the goal, the ITL
tail: the request's *stall*, its longest gap between two chunks per token the later one carried
(the largest of ``per_token_gaps_s``; the simulator's ``itl_max_s``, the longest step it decoded through), and every token's
gap (``per_token_gaps_s``; the simulator's ``RequestLog.token_gaps_s``). A prefill run in the same step as a
decode stalls that decode: it is where disaggregation's ITL gain shows, which the per-request mean averages
away.

A watcher on the client's own event loop records every pause of at least ``PAUSE_S`` (the loop not run: on
a virtual machine, mostly the hypervisor running other machines, which stops the server too). A request
whose wait for its first token spans one is marked ``paused``; the summary over the others says what the
engine did on a machine that was not stopped (docs/fidelity.md, "Where the TTFT tail comes from: the host,
not the engine").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from planner.errors import UserError
from planner.profiler.loadgen import (
    CONTINUOUS_USAGE,
    OPTIONAL_BODY,
    LoopLag,
    RequestShape,
    StreamResult,
    make_client,
    stream_completion,
)
from planner.profiler.prompts import TOKEN_IDS, PromptMaker
from planner.sim.traces.loaders import load_requests
from planner.sim.traces.records import RequestTrace


@dataclass(frozen=True)
class SliceSpec:
    trace: Path
    start_s: float = 0.0  # offset into the trace where the slice begins
    duration_s: float = 180.0  # of the replay, after rescaling
    rate_rps: float = 1.0
    max_isl: int = 2048
    max_osl: int = 256
    fmt: str = "azure"


def trace_slice(spec: SliceSpec) -> RequestTrace:
    """``rate_rps * duration_s`` consecutive requests from ``start_s``, rescaled to that mean rate, cut to fit."""
    for key, value in (("duration_s", spec.duration_s), ("rate_rps", spec.rate_rps)):
        if not value > 0:
            raise UserError(f"{key}: {value!r} must be > 0", key=key)
    for key, value, low in (("max_isl", spec.max_isl, 1), ("max_osl", spec.max_osl, 2)):
        if value < low:
            raise UserError(f"{key}: {value} must be >= {low}", key=key)
    if not spec.start_s >= 0:
        raise UserError(f"start_s: {spec.start_s!r} must be >= 0", key="start_s")
    full = load_requests(spec.trace, spec.fmt)
    count = max(2, round(spec.rate_rps * spec.duration_s))
    lo = int(np.searchsorted(full.arrival_s, spec.start_s, side="left"))
    if lo + count > len(full):
        raise UserError(f"{spec.trace}: {len(full) - lo} requests after start {spec.start_s:g}s, the slice needs "
                        f"{count} (rate x duration)", key="start_s")
    arrival = full.arrival_s[lo:lo + count] - full.arrival_s[lo]
    span = float(arrival[-1]) or 1.0
    arrival = arrival * (spec.duration_s * (count - 1) / count) / span  # mean gap 1 / rate_rps
    isl = np.clip(full.isl[lo:lo + count], 1, spec.max_isl)
    osl = np.clip(full.osl[lo:lo + count], 2, spec.max_osl)
    note = (f"{count} requests from {spec.start_s:g}s, gaps scaled x{spec.duration_s * (count - 1) / count / span:.3g} "
            f"to {spec.rate_rps:g} req/s; isl <= {spec.max_isl}, 2 <= osl <= {spec.max_osl}")
    return RequestTrace(arrival, isl.astype(np.int64), osl.astype(np.int64), str(spec.trace), note)


PAUSE_S = 0.05  # a loop that ran this late was stopped: 10x the watcher's interval, ~50x a light replay's lag


@dataclass(frozen=True)
class Measured:
    """Per request, in trace order: client TTFT and mean ITL in seconds (NaN where it failed), errors, and
    whether the client's loop paused while the request waited for its first token."""

    ttft_s: np.ndarray
    itl_mean_s: np.ndarray
    failed: np.ndarray
    errors: list[str]
    wall_s: float
    paused: np.ndarray | None = None
    itl_max_s: np.ndarray | None = None  # per request, the longest gap between two chunks (its stall)
    token_gaps_s: list[np.ndarray] | None = None  # per request, the gap before each token (token_gaps)

    def summary(self) -> dict[str, float]:
        return percentiles(self.ttft_s, self.itl_mean_s, self.itl_max_s, _joined(self.token_gaps_s))

    def unpaused_summary(self) -> dict[str, float]:
        """The same figures over the requests no pause reached before their first token."""
        if self.paused is None:
            return self.summary()
        keep = ~self.paused
        return percentiles(self.ttft_s[keep], self.itl_mean_s[keep],
                           None if self.itl_max_s is None else self.itl_max_s[keep],
                           None if self.token_gaps_s is None else
                           _joined([g for g, k in zip(self.token_gaps_s, keep, strict=True) if k]))


def _joined(gaps: list[np.ndarray] | None) -> np.ndarray | None:
    return None if gaps is None else np.concatenate([np.zeros(0), *gaps])


def paused_requests(results: list[StreamResult], pauses: list[tuple[float, float]]) -> np.ndarray:
    """Per request, whether any pause (start, end) overlaps its wait from sending to its first token."""
    out = np.zeros(len(results), dtype=bool)
    for i, r in enumerate(results):
        if not r.events_s:
            continue
        out[i] = any(start < r.events_s[0] and end > r.sent_s for start, end in pauses)
    return out


def percentiles(ttft_s: np.ndarray, itl_mean_s: np.ndarray, itl_max_s: np.ndarray | None = None,
                token_gaps_s: np.ndarray | None = None) -> dict[str, float]:
    """TTFT and per-request mean ITL p50/p95 in ms over the requests that finished; with ``itl_max_s`` the
    per-request stall's (``stall_p50_ms``, ``stall_p95_ms``); with ``token_gaps_s`` (one gap per token, all
    requests) the token-level ITL's p95 and p99 (``itl_token_p95_ms``, ``itl_token_p99_ms``, the ITL
    percentiles vLLM's own serving benchmark reports)."""
    out: dict[str, float] = {}
    series = [("ttft", ttft_s), ("itl", itl_mean_s)] + ([] if itl_max_s is None else [("stall", itl_max_s)])
    if token_gaps_s is not None:
        ok = token_gaps_s[np.isfinite(token_gaps_s)] * 1e3
        for q in (95, 99):
            out[f"itl_token_p{q}_ms"] = round(float(np.percentile(ok, q)), 2) if len(ok) else float("nan")
    for name, values in series:
        ok = values[np.isfinite(values)] * 1e3
        for q in (50, 95):
            out[f"{name}_p{q}_ms"] = round(float(np.percentile(ok, q)), 2) if len(ok) else float("nan")
    return out


def replay_trace(url: str, trace: RequestTrace, model: str = "tiny", vocab: int = 4096, seed: int = 0,
                 on_done: Callable[[int], None] | None = None) -> Measured:
    """Send every request of ``trace`` at its arrival time (from now) and measure it; blocks until all end."""
    return asyncio.run(_replay(url, trace, model, vocab, seed, on_done))


async def _replay(url: str, trace: RequestTrace, model: str, vocab: int, seed: int,
                  on_done: Callable[[int], None] | None) -> Measured:
    shape = RequestShape(model, CONTINUOUS_USAGE, OPTIONAL_BODY)
    maker = PromptMaker(TOKEN_IDS, vocab, seed)  # fresh ids: no prefix-cache hit
    prompts = [maker.make(int(n)) for n in trace.isl]
    results = [StreamResult(0.0) for _ in prompts]
    done = 0

    async def one(i: int, at_s: float) -> None:
        nonlocal done
        delay = at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            await stream_completion(client, shape, prompts[i], int(trace.osl[i]), results[i])
        except Exception as exc:  # noqa: BLE001 - a lost connection is one failed request, said in errors
            results[i].error = f"{type(exc).__name__}: {exc}"
        done += 1
        if on_done is not None:
            on_done(done)

    async with make_client(url, len(prompts), 600.0) as client:
        start = time.perf_counter() + 0.5
        with LoopLag() as lag:
            await asyncio.gather(*(one(i, start + float(a)) for i, a in enumerate(trace.arrival_s)))
        wall_s = time.perf_counter() - start
    measured = _measured(results, trace, wall_s)
    return replace(measured, paused=paused_requests(results, lag.pauses(PAUSE_S)))


def _measured(results: list[StreamResult], trace: RequestTrace, wall_s: float) -> Measured:
    n = len(results)
    ttft, itl, failed = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=bool)
    stall = np.full(n, np.nan)
    token_gaps: list[np.ndarray] = [np.zeros(0)] * n
    errors: list[str] = []
    for i, r in enumerate(results):
        got = r.tokens[-1] if r.tokens else 0
        if not r.ok or got != int(trace.osl[i]):
            failed[i] = True
            errors.append(f"request {i}: {r.error or f'HTTP {r.status}'}; {got} of {int(trace.osl[i])} tokens")
            continue
        ttft[i] = r.ttft_s
        if got > 1:  # a one-token output has no gap
            itl[i] = mean_gap_s(r)
            token_gaps[i] = per_token_gaps_s(r.events_s, r.tokens)
            stall[i] = float(token_gaps[i].max()) if len(token_gaps[i]) else 0.0  # one chunk: no gap seen
    return Measured(ttft, itl, failed, errors, wall_s, itl_max_s=stall, token_gaps_s=token_gaps)


def mean_gap_s(r: StreamResult) -> float:
    """A finished stream's mean gap between tokens, (last - first) / (tokens - 1): the simulator's ITL."""
    return (r.events_s[-1] - r.events_s[0]) / (r.tokens[-1] - 1)


def per_token_gaps_s(events_s: list[float], tokens: list[int]) -> np.ndarray:
    """The gap before each token after the first: a chunk of k tokens after a gap g gives k gaps of g / k (the
    HTTP process merged what the engine made at that pace, docs/engines/vllm-cpu.md: k tokens after k steps
    are not one long step). Their largest is the request's stall."""
    gaps = np.diff(np.asarray(events_s, dtype=float))
    counts = np.maximum(np.diff(np.asarray(tokens, dtype=np.int64)), 1)
    return np.repeat(gaps / counts, counts)


SPEED_ISL, SPEED_DECODE_TOKENS, SPEED_REPS = 1024, 48, 5


def probe_speed(prefill_url: str, decode_url: str, reps: int = SPEED_REPS, model: str = "tiny", vocab: int = 4096,
                seed: int = 2) -> dict[str, float]:
    """The engine's speed alone, the same way each time: the median client TTFT of a lone 1,024-token prompt
    on ``prefill_url`` and the median mean gap of a lone 48-token stream on ``decode_url`` (ms). Taken before
    the profile and after the replay, their ratio is how far the engine's own speed moved in between."""
    return asyncio.run(_speed(prefill_url, decode_url, reps, model, vocab, seed))


async def _speed(prefill_url: str, decode_url: str, reps: int, model: str, vocab: int, seed: int) -> dict[str, float]:
    shape = RequestShape(model, CONTINUOUS_USAGE, OPTIONAL_BODY)
    maker = PromptMaker(TOKEN_IDS, vocab, seed)
    ttft, step = [], []
    async with make_client(prefill_url, 2, 120.0) as pre, make_client(decode_url, 2, 120.0) as dec:
        for _ in range(reps):
            r = await stream_completion(pre, shape, maker.make(SPEED_ISL), 2)
            d = await stream_completion(dec, shape, maker.make(16), SPEED_DECODE_TOKENS)
            for name, res in (("prefill", r), ("decode", d)):
                if not res.ok:
                    raise UserError(f"speed probe on the {name} server: {res.error or res.status}", key="url")
            ttft.append(r.ttft_s)
            if d.tokens and d.tokens[-1] > 1:
                step.append(mean_gap_s(d))
    return {"prefill_ttft_ms": round(float(np.median(ttft)) * 1e3, 2),
            "decode_step_ms": round(float(np.median(step)) * 1e3, 3) if step else float("nan")}


def speed_drift(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after / before per figure of probe_speed (1.0: the engine ran as fast in the replay as in its profile)."""
    out = {}
    for k, was in before.items():
        now = after.get(k)
        out[k] = round(now / was, 3) if was and now is not None and now == now else float("nan")
    return out


def probe_speed_after(prefill_url: str, decode_url: str) -> tuple[dict[str, float], str | None]:
    """probe_speed after a replay, never fatal: a server that died in the replay costs the drift figure (and
    says why), not the replay's results."""
    try:
        return probe_speed(prefill_url, decode_url), None
    except Exception as exc:  # noqa: BLE001 - any failure here (refused, reset, UserError) is one note
        return {}, f"speed probe after the replay failed ({type(exc).__name__}: {exc}); no drift figure"


HANDOFF_ISLS = (256, 1024, 2048)  # prompt lengths the hand-over is probed at (the slice's prompts are <= 2,048)


def measure_handoff(router_url: str, prefill_url: str, isls: tuple[int, ...] = HANDOFF_ISLS, reps: int = 8,
                    model: str = "tiny", vocab: int = 4096, seed: int = 1) -> dict[int, float]:
    """The disaggregated hand-over's own latency, alone, per prompt length: TTFT through the router (prefill
    server, then the decode server loading the KV) less TTFT from the prefill server directly, medians of
    ``reps`` each. It holds the decode request's front end, the connector's write and load of the KV (files,
    so it grows with the prompt) and the decode server's first step."""
    return asyncio.run(_handoff(router_url, prefill_url, isls, reps, model, vocab, seed))


def handoff_line(gaps_s: dict[int, float]) -> tuple[float, float]:
    """Least-squares ``(intercept_s, slope_s_per_token)`` of the hand-over against prompt length. A slope that
    comes out negative (noise: the hand-over does not shrink with the prompt) is 0, the intercept the mean."""
    isl = np.array(sorted(gaps_s), dtype=float)
    gap = np.array([gaps_s[int(i)] for i in isl])
    if len(isl) < 2 or float(np.ptp(isl)) == 0.0:
        return max(0.0, float(gap.mean())), 0.0
    slope, intercept = np.polyfit(isl, gap, 1)
    if slope <= 0.0:
        return max(0.0, float(gap.mean())), 0.0
    return max(0.0, float(intercept)), float(slope)


def handoff_config(gaps_s: dict[int, float], first_step_s: float, admit_s: float,
                   kv_bytes_per_token: float) -> dict[str, float]:
    """SimConfig fields that reproduce probed hand-over ``gaps_s`` (prompt length -> s) on a lone request: the
    line's slope as the KV link's bandwidth (left at the default when 0), ``decode_admit_s`` as given, and the
    rest of its intercept, less the decode step the simulator times itself, as ``kv_handoff_s``."""
    intercept_s, slope_s_per_token = handoff_line(gaps_s)
    parts = {"kv_handoff_s": max(0.0, intercept_s - first_step_s - admit_s), "decode_admit_s": admit_s}
    if slope_s_per_token > 0.0:
        parts["link_bytes_per_s"] = kv_bytes_per_token / slope_s_per_token
    return parts


async def _handoff(router_url: str, prefill_url: str, isls: tuple[int, ...], reps: int, model: str, vocab: int,
                   seed: int) -> dict[int, float]:
    shape = RequestShape(model, CONTINUOUS_USAGE, OPTIONAL_BODY)
    maker = PromptMaker(TOKEN_IDS, vocab, seed)
    gaps: dict[int, float] = {}
    async with make_client(router_url, 2, 120.0) as via_router, make_client(prefill_url, 2, 120.0) as direct:
        for isl in isls:
            times: dict[str, list[float]] = {"router": [], "direct": []}
            for _ in range(reps):
                for name, client in (("router", via_router), ("direct", direct)):
                    r = await stream_completion(client, shape, maker.make(isl), 2)  # fresh: no prefix-cache hit
                    if not r.ok:
                        raise UserError(f"hand-over probe via {name}: {r.error or r.status}", key="url")
                    times[name].append(r.ttft_s)
            gaps[isl] = float(np.median(times["router"]) - np.median(times["direct"]))
    return gaps
