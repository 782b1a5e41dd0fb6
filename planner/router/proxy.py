"""Forwarding one OpenAI request: to one replica (aggregated) or in two steps (prefill, then decode).

Failures before anything reached the client (connection refused, a 5xx, a timeout, a stream that broke
before its first byte) are retried on another replica of the pool, up to ``max_attempts`` replicas. A
stream that breaks after bytes went out cannot be retried (the client has half an answer): it ends with
an OpenAI-style error event instead of ``[DONE]``, so the client sees a failed request, not a truncated
success. A 4xx is the engine judging the request: passed on as it is, never retried.

Disaggregated (docs/engines/vllm-cpu.md, ExampleConnector): the prefill replica gets the request with
``max_tokens: 1`` and no streaming (it computes the prompt's KV and hands it over), then the decode
replica gets the original request and its answer is relayed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse

from planner.router.backends import Backend, Backends
from planner.telemetry import RouterMetrics
from planner.types import Mode, Pool

RETRY_PAUSE_S = 0.25


@dataclass
class Attempt:
    """A replica that answered 2xx/4xx: its response, and for a stream the first chunk already read."""

    backend: Backend
    response: httpx.Response
    chunks: AsyncIterator[bytes] | None = None
    first: bytes = b""


class Failure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_body(message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "router_error", "code": status}}


def prefill_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request for the prefill step: one token, not streamed (only its KV matters)."""
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "min_tokens")}
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    out["stream"] = False
    return out


class Proxy:
    def __init__(self, backends: Backends, client: httpx.AsyncClient, metrics: RouterMetrics, mode: Mode,
                 max_attempts: int = 3) -> None:
        self.backends = backends
        self.client = client
        self.metrics = metrics
        self.mode = mode
        self.max_attempts = max_attempts

    async def handle(self, path: str, body: dict[str, Any], endpoint: str, headers: Mapping[str, str]) -> Response:
        stream = body.get("stream") is True
        try:
            if self.mode is Mode.DISAGGREGATED:
                pre = await self.attempt(Pool.PREFILL, path, prefill_body(body), False, headers)
                if pre.response.status_code >= 400:
                    return self._passed_on(pre, endpoint)
                pool = Pool.DECODE
            else:
                pool = Pool.AGGREGATED
            done = await self.attempt(pool, path, body, stream, headers)
        except Failure as exc:
            self.metrics.requests.labels(endpoint=endpoint, outcome="failed").inc()
            return JSONResponse(error_body(str(exc), exc.status), status_code=exc.status)
        if stream and done.response.status_code == 200:
            return StreamingResponse(self._relay(done, pool, endpoint), status_code=200,
                                     media_type=done.response.headers.get("content-type", "text/event-stream"))
        return self._passed_on(done, endpoint)

    def _passed_on(self, done: Attempt, endpoint: str) -> Response:
        """A whole (non-streamed) answer, already read and released: 2xx ok, 4xx the engine's verdict."""
        outcome = "ok" if done.response.status_code < 400 else "client_error"
        self.metrics.requests.labels(endpoint=endpoint, outcome=outcome).inc()
        return Response(done.first, status_code=done.response.status_code,
                        media_type=done.response.headers.get("content-type", "application/json"))

    async def attempt(self, pool: str, path: str, body: dict[str, Any], stream: bool,
                      headers: Mapping[str, str]) -> Attempt:
        """Send to the least-loaded replica of ``pool``, and to others while the failure is retryable.

        Answers read whole have their replica released here; a 200 stream keeps its replica (released by
        the relay when the stream ends).
        """
        tried: set[str] = set()
        last = "no replica in rotation"
        for n in range(self.max_attempts):
            self.backends.refresh()
            # Another replica first; once each was tried, the least loaded again (a pool of one still gets
            # its retries: most failures here are transient - a reused connection the engine had just closed).
            backend = self.backends.pick(pool, tried) or self.backends.pick(pool, set())
            if backend is None:
                break
            if n:
                self.metrics.retries.labels(pool=pool).inc()
                if backend.address in tried:
                    await asyncio.sleep(RETRY_PAUSE_S * n)
            tried.add(backend.address)
            self.backends.acquire(backend)
            try:
                return await self._once(backend, path, body, stream, headers)
            except _Retryable as exc:
                self.backends.release(backend)
                self.metrics.errors.labels(pool=pool, kind=exc.kind).inc()
                last = f"{backend.address}: {exc}"
            except BaseException:  # the client went away (cancelled): nothing in flight for it any more
                self.backends.release(backend)
                raise
        if not tried:
            self.metrics.errors.labels(pool=pool, kind="no_replica").inc()
            raise Failure(503, f"no {pool} replica in rotation")
        raise Failure(502, f"{self.max_attempts} attempts on {len(tried)} {pool} replica(s) failed; last: {last}")

    async def _once(self, backend: Backend, path: str, body: dict[str, Any], stream: bool,
                    headers: Mapping[str, str]) -> Attempt:
        request = self.client.build_request("POST", backend.url + path, json=body, headers=dict(headers))
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise _Retryable("timeout", f"no answer ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise _Retryable("connect", f"{type(exc).__name__}: {exc}") from None
        if response.status_code >= 500:
            text = (await _read_quietly(response))[:200]
            raise _Retryable("upstream_5xx", f"HTTP {response.status_code} {text!r}")
        try:
            if stream and response.status_code == 200:
                chunks = response.aiter_raw()
                first = await chunks.__anext__()  # a replica that dies before its first byte is retried
                return Attempt(backend, response, chunks, first)
            content = await response.aread()
        except (httpx.HTTPError, StopAsyncIteration) as exc:
            await response.aclose()
            raise _Retryable("mid_stream", f"broke before the first byte ({type(exc).__name__})") from None
        await response.aclose()
        self.backends.release(backend)  # read whole: nothing in flight on it any more
        return Attempt(backend, response, None, content)

    async def _relay(self, done: Attempt, pool: str, endpoint: str) -> AsyncIterator[bytes]:
        outcome = "ok"
        try:
            yield done.first
            assert done.chunks is not None
            async for chunk in done.chunks:
                yield chunk
        except httpx.HTTPError as exc:
            outcome = "failed"
            self.metrics.errors.labels(pool=pool, kind="mid_stream").inc()
            message = f"replica {done.backend.address} failed mid-stream ({type(exc).__name__}); request incomplete"
            yield f"data: {json.dumps(error_body(message, 502))}\n\n".encode()
        finally:
            # Released before the await: a client that went away cancels this generator mid-finally.
            self.backends.release(done.backend)
            self.metrics.requests.labels(endpoint=endpoint, outcome=outcome).inc()
            await done.response.aclose()


class _Retryable(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


async def _read_quietly(response: httpx.Response) -> str:
    try:
        return (await response.aread()).decode("utf-8", errors="replace")
    except httpx.HTTPError:
        return ""
    finally:
        await response.aclose()
