"""`planner profile --backend endpoint --url URL`: measure a live OpenAI-compatible server (vLLM, SGLang,
Dynamo's frontend, `planner emulate`) at the one TP size it runs (``tp``, recorded in the profile).

Steps: read what the server says about itself (planner.profiler.endpoint_server), find how it takes
requests (token-id prompts or calibrated text; usage on every chunk or counted chunks), warm up, sweep
(planner.profiler.endpoint_measure), then build the profile with planner.profiler.assemble, so grids,
selection, disaggregation advice and the format are the other backends'. The provenance says what was
measured, how, and what could not be (skipped points with their reasons, values the server did not expose).
A sweep that fails or is cancelled (``SweepRequest.cancel``) writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import random
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from threading import Event
from typing import TypeVar

import httpx
from rich.console import Console
from rich.progress import Progress

from planner.errors import UserError
from planner.perf.hardware import HardwareSpec
from planner.perf.model import ModelSpec
from planner.profile import Profile
from planner.profiler.assemble import RawSweep, assemble
from planner.profiler.endpoint_measure import Measured, Plan, Sweeper
from planner.profiler.endpoint_server import ServerInfo, inspect_server
from planner.profiler.grids import SweepCancelled, SweepRequest
from planner.profiler.loadgen import (
    CONTINUOUS_USAGE,
    OPTIONAL_BODY,
    PLAIN_USAGE,
    RequestShape,
    ServerUnreachable,
    make_client,
    stream_completion,
)
from planner.profiler.prompts import TEXT, TOKEN_IDS, WORDS, PromptMaker

T = TypeVar("T")
METHOD = ("live server over /v1/completions (SSE, usage in the stream); the grid in passes (untimed ones "
          "first), each point the median of its timed runs; prefill: TTFT at concurrency 1, one output token; "
          "decode: batch streams at once, ITL over the "
          "window in which all of them decode (latest first token to earliest last token), median over "
          "streams; client-observed times (HTTP included)")


@dataclass(frozen=True)
class EndpointResult:
    """One server's measurements at its TP size, ready for assemble (the kubernetes backend joins several)."""

    sweep: RawSweep
    software: dict[str, str]
    notes: list[str]


def check_request(req: SweepRequest, url: str | None) -> tuple[str, int]:
    """(url, tp) of a request the endpoint backend can run, else a one-line UserError naming the field."""
    if not url:
        raise UserError("url: backend endpoint needs the server's base URL, e.g. http://127.0.0.1:8000", key="url")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"url: {url!r}: must start with http:// or https://", key="url")
    if len(req.tp) != 1:
        raise UserError(f"tp: {','.join(map(str, req.tp))}: backend endpoint measures one server; give the one "
                        "TP size it runs", key="tp")
    checks = (("warmup", req.warmup >= 0, ">= 0"), ("iters", req.iters >= 1, ">= 1"),
              ("decode_tokens", req.decode_tokens >= 4, ">= 4"),
              ("concurrency_limit", req.concurrency_limit is None or req.concurrency_limit >= 1, ">= 1"),
              ("request_timeout_s", req.request_timeout_s > 0, "> 0"))
    for key, ok, allowed in checks:
        if not ok:
            raise UserError(f"{key}: {getattr(req, key)!r} must be {allowed}", key=key)
    return url.rstrip("/"), req.tp[0]


def run_async(make: Callable[[], Awaitable[T]], cancel: Event | None) -> T:
    """Run a coroutine to completion from sync code (in a fresh thread if this one already runs a loop),
    ending it early when ``cancel`` is set: its requests are closed and SweepCancelled is raised."""

    async def guarded() -> T:
        task = asyncio.ensure_future(make())
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.05)
            if done:
                return task.result()
            if cancel is not None and cancel.is_set():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise SweepCancelled("sweep cancelled; its requests were ended and nothing was written")

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(guarded())
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, guarded()).result()


@dataclass(frozen=True)
class Asking:
    """How this server takes requests (found by probe_shape)."""

    shape: RequestShape
    prompts: PromptMaker
    usage_per_chunk: bool
    notes: list[str]


async def probe_shape(client: httpx.AsyncClient, server: ServerInfo, vocab: int) -> Asking:
    """How this server takes requests: the optional fields it accepts, token-id prompts or text."""
    notes: list[str] = []
    text = " ".join(WORDS[:8])
    for options, extra in ((CONTINUOUS_USAGE, OPTIONAL_BODY), (PLAIN_USAGE, {})):
        shape = RequestShape(server.served_model, options, extra)
        first = await stream_completion(client, shape, text, 2)
        if first.ok:
            break
    else:
        raise UserError(f"url: {server.url}: POST /v1/completions for {server.served_model!r} failed: HTTP "
                        f"{first.status} {first.error}", key="url")
    if not extra:
        notes.append("server rejected ignore_eos / continuous_usage_stats: sent without them")
    if not first.usage_per_chunk:
        notes.append("tokens per chunk counted (the server puts no usage on each chunk), checked against the "
                     "final usage")
    if first.prompt_tokens is None:
        notes.append("the server returns no usage in streams: prompt lengths could not be checked")
    seed = random.SystemRandom().randrange(2**32)  # a new sweep must not hit the last one's prefix cache
    ids = PromptMaker(TOKEN_IDS, vocab=vocab, seed=seed)
    probe = await stream_completion(client, shape, ids.make(16), 1)
    if probe.ok and probe.prompt_tokens in (16, None):
        return Asking(shape, ids, first.usage_per_chunk, notes)
    prompts = PromptMaker(TEXT, seed=seed)
    fits = []
    for words in (32, 256):
        r = await stream_completion(client, shape, " ".join(WORDS[i % len(WORDS)] for i in range(words)), 1)
        if r.ok and r.prompt_tokens is not None:
            fits.append((words, r.prompt_tokens))
    if len(fits) == 2:
        prompts.fit(fits)
    notes.append(f"prompts: text calibrated by the server's usage ({prompts.tokens_per_word:.3f} tokens/word; "
                 f"token-id prompts {'answered HTTP ' + str(probe.status) if not probe.ok else 'miscounted'})")
    return Asking(shape, prompts, first.usage_per_chunk, notes)


def _software(server: ServerInfo, req: SweepRequest, tp: int, asking: Asking, concurrency: int) -> dict[str, str]:
    info = {"server_url": server.url, "served_model": server.served_model, "server_root": str(server.root or ""),
            "server_version": server.version or "not exposed", "max_model_len": str(server.max_model_len or ""),
            "tp": str(tp), "prompts": asking.prompts.mode,
            "token_counts": "usage on every chunk" if asking.usage_per_chunk else "chunks counted",
            "loadgen": f"httpx {httpx.__version__}, python {platform.python_version()}",
            "warmup": str(req.warmup), "iters": str(req.iters), "decode_tokens": str(req.decode_tokens),
            "max_concurrency": str(concurrency)}
    return {**info, **server.flags}


async def _sweep(req: SweepRequest, model: ModelSpec, url: str, tp: int, console: Console) -> EndpointResult:
    isl_grid, batch_grid, ctx_grid = req.grids(model.max_context_tokens)  # validates; cut below by the server
    concurrency = min(max(batch_grid), req.concurrency_limit or max(batch_grid))
    async with make_client(url, concurrency, req.request_timeout_s, req.api_key) as client:
        server = await inspect_server(client, url, model.name, req.served_model)
        flag_tp = server.flags.get("sglang.tp_size")
        if flag_tp is not None and flag_tp != str(tp):
            raise UserError(f"tp: {tp} given, but the server at {url} runs tp_size {flag_tp}", key="tp")
        max_len = server.max_model_len or model.max_context_tokens
        isl_grid, batch_grid, ctx_grid = req.grids(min(max_len, model.max_context_tokens))
        asking = await probe_shape(client, server, model.vocab)
        plan = Plan(isl_grid, batch_grid, ctx_grid, req.warmup, req.iters, req.decode_tokens, max_len,
                    req.concurrency_limit)
        total = (len(isl_grid) + len(batch_grid) * len(ctx_grid)) * (req.warmup + req.iters)
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"endpoint sweep {server.served_model} (tp {tp})", total=total)
            sweeper = Sweeper(client, server, asking.shape, asking.prompts, plan, lambda: progress.advance(task))
            measured = await sweeper.run()
    return _result(server, req, tp, asking, concurrency, measured)


def _result(server: ServerInfo, req: SweepRequest, tp: int, asking: Asking, concurrency: int,
            measured: Measured) -> EndpointResult:
    for stage, points in (("prefill", measured.prefill), ("decode", measured.decode)):
        if not points:
            why = "; ".join(s for s in measured.skipped if s.startswith(stage))[:400] or "no grid point"
            raise UserError(f"url: {server.url}: no {stage} point could be measured ({why}); nothing was written",
                            key="url")
    kv = server.kv_capacity_tokens or measured.most_tokens_held
    kv_note = (f"KV capacity from {server.kv_source}" if server.kv_capacity_tokens
               else f"KV capacity {kv} tokens: a lower bound (the most seen held at once)")
    all_notes = [METHOD, f"tp {tp}: as the server runs it", kv_note, *server.notes, *asking.notes, *measured.notes,
                 *(f"skipped {s}" for s in measured.skipped)]
    sweep = RawSweep(tp=tp, gpus=tp, prefill=measured.prefill, decode=measured.decode, kv_capacity_tokens=kv,
                     max_batch=measured.largest_batch)
    return EndpointResult(sweep, _software(server, req, tp, asking, concurrency), all_notes)


def measure_endpoint(model: ModelSpec, req: SweepRequest, url: str | None = None, tp: int | None = None,
                     console: Console | None = None) -> EndpointResult:
    """Sweep one server. ``url``/``tp`` override the request's (the kubernetes backend's workers)."""
    base, req_tp = check_request(req if tp is None else _with_tp(req, tp), url or req.url)
    err = console or Console(stderr=True)
    try:
        return run_async(lambda: _sweep(req, model, base, req_tp, err), req.cancel)
    except ServerUnreachable as exc:
        raise UserError(f"url: {base}: connection lost mid-sweep ({exc}); nothing was written", key="url") from None


def _with_tp(req: SweepRequest, tp: int) -> SweepRequest:
    return replace(req, tp=(tp,))


def profile_endpoint(model: ModelSpec, hw: HardwareSpec, req: SweepRequest) -> Profile:
    result = measure_endpoint(model, req)
    return assemble(model, hw, req, [result.sweep], backend="endpoint", software=result.software,
                    notes="; ".join(result.notes))
