"""The router's HTTP surface: OpenAI /v1/completions and /v1/chat/completions (SSE passed through as it
arrives), /v1/models, /health, /metrics and /router/replicas (what the actuator asks before draining).

/health is 200 while every pool the mode needs has a replica in rotation, 503 (and which pool has none)
otherwise, so a load balancer or a test can wait on it.

With ``hold`` (`planner route`'s default), a request that finds no replica in rotation waits for one
(router/hold.py: bounded queue and wait, 503 with Retry-After past either) and, with ``wake``, the router
tells the controller (``POST {wake.url}/v1/wake``) so it wakes a policy at zero at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from planner.router.backends import Backends
from planner.router.hold import Holding
from planner.router.proxy import Proxy, error_body
from planner.telemetry import RouterMetrics
from planner.types import Mode

log = logging.getLogger("planner.router")

REFRESH_S = 0.2
FORWARDED_HEADERS = ("authorization",)
WAKE_POST_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Hold:
    """Hold requests while no replica is in rotation: at most ``max_held`` at once, each ``timeout_s``."""

    max_held: int
    timeout_s: float


@dataclass(frozen=True)
class Wake:
    """Where the wake signal goes: the controller's API (``planner run``'s --port), for ``policy``."""

    url: str
    policy: str
    token: str | None = None


def create_router_app(targets_file: Path, mode: Mode, metrics: RouterMetrics | None = None, *,
                      read_timeout_s: float = 600.0, max_attempts: int = 3, hold: Hold | None = None,
                      wake: Wake | None = None) -> FastAPI:
    metrics = metrics or RouterMetrics()
    backends = Backends(targets_file, metrics)
    holder: dict[str, Proxy] = {}
    holding = (Holding([p.value for p in mode.pools], backends.in_rotation, metrics, max_held=hold.max_held,
                       timeout_s=hold.timeout_s, wake=_wake_sender(holder, wake, metrics))
               if hold is not None else None)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # No pool limit: the router must never queue a request behind others for a connection.
        # Idle connections are dropped after 2 s, before an engine's own keep-alive timeout (uvicorn: 5 s), so
        # a request is never sent on a connection the engine is closing at that moment.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0)
        # A connect that takes long is an engine too busy to accept, not a dead one (that is refused at once).
        timeout = httpx.Timeout(connect=30.0, read=read_timeout_s, write=30.0, pool=None)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            holder["proxy"] = Proxy(backends, client, metrics, mode, max_attempts)
            watcher = asyncio.create_task(_watch(backends, holding))
            try:
                yield
            finally:
                watcher.cancel()

    app = FastAPI(title="planner router", lifespan=lifespan)
    app.state.backends = backends
    app.state.metrics = metrics
    app.state.holding = holding
    _openai_routes(app, holder, metrics, holding)
    _operator_routes(app, backends, metrics, mode, holder, targets_file)
    return app


def _openai_routes(app: FastAPI, holder: dict[str, Proxy], metrics: RouterMetrics,
                   holding: Holding | None = None) -> None:
    async def forward(request: Request, path: str, endpoint: str) -> Response:
        try:
            body: Any = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            metrics.requests.labels(endpoint=endpoint, outcome="client_error").inc()
            return JSONResponse(error_body("request body is not valid JSON", 400), status_code=400)
        if not isinstance(body, dict):
            metrics.requests.labels(endpoint=endpoint, outcome="client_error").inc()
            return JSONResponse(error_body("request body must be a JSON object", 400), status_code=400)
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        if holding is not None:
            holder["proxy"].backends.refresh()
            refused = await holding.admit()
            if refused is not None:
                metrics.requests.labels(endpoint=endpoint, outcome="failed").inc()
                return JSONResponse(error_body(refused.message, 503), status_code=503,
                                    headers={"Retry-After": str(refused.retry_after_s)})
        return await holder["proxy"].handle(path, body, endpoint, headers)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward(request, "/v1/completions", "completions")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await forward(request, "/v1/chat/completions", "chat")


def _operator_routes(app: FastAPI, backends: Backends, metrics: RouterMetrics, mode: Mode,
                     holder: dict[str, Proxy], targets_file: Path) -> None:
    @app.get("/v1/models")
    async def models() -> Response:
        backends.refresh()
        pool = mode.itl_pool.value  # the replicas that answer clients
        backend = backends.pick(pool, set())
        if backend is None:
            return JSONResponse(error_body(f"no {pool} replica in rotation", 503), status_code=503)
        try:
            r = await holder["proxy"].client.get(backend.url + "/v1/models")
        except httpx.HTTPError as exc:
            return JSONResponse(error_body(f"{backend.address}: {type(exc).__name__}", 502), status_code=502)
        return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

    @app.get("/health")
    async def health() -> JSONResponse:
        backends.refresh()
        counts = {p.value: backends.in_rotation(p.value) for p in mode.pools}
        empty = [p for p, n in counts.items() if n == 0]
        body = {"status": "ok" if not empty else "no replicas", "replicas": counts}
        return JSONResponse(body, status_code=200 if not empty else 503)

    @app.get("/router/replicas")
    async def replicas() -> dict[str, Any]:
        backends.refresh()
        return {"targets_file": str(targets_file), "replicas": backends.view()}

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        backends.refresh()
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _watch(backends: Backends, holding: Holding | None = None) -> None:
    while True:
        backends.refresh()
        if holding is not None:
            holding.release()
        await asyncio.sleep(REFRESH_S)


def _wake_sender(holder: dict[str, Proxy], wake: Wake | None, metrics: RouterMetrics
                 ) -> Callable[[int], Coroutine[Any, Any, None]] | None:
    """The wake signal: ``POST {url}/v1/wake`` with the policy and the requests held; a failure is counted and
    logged (the hold goes on, and the signal is repeated while requests wait)."""
    if wake is None:
        return None
    headers = {"Authorization": f"Bearer {wake.token}"} if wake.token else {}

    async def send(waiting: int) -> None:
        try:
            r = await holder["proxy"].client.post(f"{wake.url.rstrip('/')}/v1/wake", headers=headers,
                                                  json={"policy": wake.policy, "waiting": waiting},
                                                  timeout=WAKE_POST_TIMEOUT_S)
            ok = r.status_code < 300
            problem = f"HTTP {r.status_code} {r.text[:200]!r}"
        except httpx.HTTPError as exc:
            ok, problem = False, f"{type(exc).__name__}: {exc}"
        metrics.wake_signals.labels(outcome="ok" if ok else "failed").inc()
        if not ok:
            log.warning("router: wake signal to %s failed (%s); requests stay held", wake.url, problem)

    return send
