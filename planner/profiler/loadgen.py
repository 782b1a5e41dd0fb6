"""Async load generator for OpenAI-compatible servers (vLLM, SGLang, Dynamo's frontend).

Each request is a streamed ``/v1/completions`` call (SSE) asking for usage in the stream
(``stream_options.include_usage``, and ``continuous_usage_stats`` where the server takes it, so every chunk
says how many tokens it carries: a server whose HTTP process lags its engine merges tokens into one chunk,
and counting chunks would then under-count). Each chunk with output gets one ``perf_counter`` timestamp on
arrival; nothing else is parsed on the hot path beyond one ``json.loads``.

The client itself is measured (``planner bench endpoint``): its CPU time per token and the lag of its
event loop, so a sweep can show the load generator was not what limited the numbers.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

# Sent with every request when the server accepts them (probed once): generate exactly max_tokens, and
# report usage on every chunk. A server that rejects them gets the request without.
OPTIONAL_BODY: dict[str, Any] = {"ignore_eos": True}
CONTINUOUS_USAGE = {"include_usage": True, "continuous_usage_stats": True}
PLAIN_USAGE = {"include_usage": True}


class ServerUnreachable(Exception):
    """The server cannot be connected to (refused, DNS, TLS): the sweep cannot go on."""


@dataclass
class StreamResult:
    """One streamed completion as the client saw it. Times are ``time.perf_counter()`` seconds."""

    sent_s: float
    events_s: list[float] = field(default_factory=list)  # arrival of each chunk that carried tokens
    tokens: list[int] = field(default_factory=list)  # completion tokens received up to that chunk
    prompt_tokens: int | None = None  # from the server's usage
    completion_tokens: int | None = None
    usage_per_chunk: bool = False  # token counts came from continuous usage, not from counting chunks
    finish_reason: str | None = None
    status: int = 200
    error: str | None = None
    closed_early: bool = False  # the client closed it (run_streams' stop_if_queued), not the server

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and bool(self.events_s)

    @property
    def ttft_s(self) -> float:
        return self.events_s[0] - self.sent_s


@dataclass(frozen=True)
class RequestShape:
    """What every request of a run sends besides its prompt (fixed once the server was probed)."""

    model: str
    stream_options: dict[str, Any]
    extra: dict[str, Any]


def make_client(url: str, concurrency: int, timeout_s: float, api_key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    return httpx.AsyncClient(base_url=url.rstrip("/"), limits=limits, headers=headers,
                             timeout=httpx.Timeout(timeout_s, connect=10.0))


def error_message(text: str) -> str:
    """The server's error message (OpenAI ``{"error": {"message": ...}}``, FastAPI ``detail``, or the text)."""
    try:
        body = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return " ".join(str(err).split())[:200]
    return " ".join(text.split())[:200]


def _take_chunk(res: StreamResult, chunk: dict[str, Any], now: float) -> None:
    if "error" in chunk and not chunk.get("choices"):
        res.error = error_message(json.dumps(chunk))
        return
    usage = chunk.get("usage")
    choices = chunk.get("choices") or []
    if choices:
        choice = choices[0]
        res.finish_reason = choice.get("finish_reason") or res.finish_reason
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            res.usage_per_chunk = True
            count = usage["completion_tokens"]
        else:
            count = (res.tokens[-1] if res.tokens else 0) + (1 if choice.get("text") else 0)
        if count > (res.tokens[-1] if res.tokens else 0):
            res.events_s.append(now)
            res.tokens.append(count)
    if isinstance(usage, dict):
        res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
        res.completion_tokens = usage.get("completion_tokens", res.completion_tokens)


async def stream_completion(client: httpx.AsyncClient, shape: RequestShape, prompt: str | list[int],
                            max_tokens: int, into: StreamResult | None = None) -> StreamResult:
    """One streamed completion, recorded into ``into`` as it arrives (a caller can watch it). Connection
    failures raise ServerUnreachable; every other failure (HTTP status, a broken stream, a timeout, an
    error event) is returned in the result, for the caller to judge."""
    body = {"model": shape.model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "temperature": 0.0, "stream_options": shape.stream_options, **shape.extra}
    res = into if into is not None else StreamResult(0.0)
    res.sent_s = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                res.status = response.status_code
                res.error = error_message((await response.aread()).decode(errors="replace"))
                return res
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                try:
                    chunk = json.loads(data)
                except ValueError:
                    res.error = f"not JSON in the event stream: {data[:80]!r}"
                    break
                _take_chunk(res, chunk, now)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
        raise ServerUnreachable(f"{type(exc).__name__}: {exc or 'no answer'}") from None
    except httpx.TimeoutException as exc:
        res.error = f"timed out ({type(exc).__name__})"
    except httpx.TransportError as exc:
        res.error = f"stream broken ({type(exc).__name__}: {exc})"
    if res.ok and res.usage_per_chunk is False and res.completion_tokens and res.tokens \
            and res.completion_tokens != res.tokens[-1]:
        _rescale_counted(res)
    return res


def _rescale_counted(res: StreamResult) -> None:
    """Chunks were counted as one token each but usage says otherwise: spread the difference evenly."""
    assert res.completion_tokens is not None
    scale = res.completion_tokens / res.tokens[-1]
    res.tokens = [max(1, round(t * scale)) for t in res.tokens]


async def run_streams(client: httpx.AsyncClient, shape: RequestShape, prompts: Sequence[str | list[int]],
                      max_tokens: int, stop_if_queued: bool = False) -> list[StreamResult]:
    """All prompts at once (the batch), each its own stream; results in prompt order.

    ``stop_if_queued``: once a stream has ended before another had its first token, the server is not
    running the batch at once; the other streams are closed (the server aborts them) rather than waited
    for, and come back without their last tokens."""
    results = [StreamResult(0.0) for _ in prompts]
    tasks = [asyncio.ensure_future(stream_completion(client, shape, p, max_tokens, r))
             for p, r in zip(prompts, results, strict=True)]
    pending: set[asyncio.Future[StreamResult]] = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # ServerUnreachable ends the batch
            if stop_if_queued and pending and _queued(results, tasks):
                break
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for task, result in zip(tasks, results, strict=True):
        result.closed_early = task.cancelled()
    return results


def _queued(results: list[StreamResult], tasks: Sequence[asyncio.Future[StreamResult]]) -> bool:
    """Some stream ended before another one's first token (or while it still has none)."""
    ends = [r.events_s[-1] for r, t in zip(results, tasks, strict=True) if t.done() and r.events_s]
    if not ends:
        return False
    first_end = min(ends)
    return any(not r.events_s or r.events_s[0] > first_end for r in results)


class LoopLag:
    """How late the event loop wakes a task that asked to sleep ``interval_s`` (the client's scheduling lag:
    a timestamp taken on a busy loop is late by about this much)."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.lags_s: list[float] = []
        self.woke_s: list[float] = []  # when each lag was measured (perf_counter), beside lags_s
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            now = time.perf_counter()
            self.lags_s.append(max(0.0, now - start - self.interval_s))
            self.woke_s.append(now)

    def pauses(self, at_least_s: float) -> list[tuple[float, float]]:
        """(start, end) perf_counter times of every stretch the loop did not run for ``at_least_s`` or more."""
        return [(woke - lag, woke) for woke, lag in zip(self.woke_s, self.lags_s, strict=True) if lag >= at_least_s]

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def quantile_s(self, q: float) -> float:
        if not self.lags_s:
            return 0.0
        ordered = sorted(self.lags_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def median_s(self) -> float:
        return statistics.median(self.lags_s) if self.lags_s else 0.0
