"""The router's HTTP surface: OpenAI /v1/completions and /v1/chat/completions (SSE passed through as it
arrives), /v1/models, /health, /metrics and /router/replicas (what the actuator asks before draining).

/health is 200 while every pool the mode needs has a replica in rotation, 503 (and which pool has none)
otherwise, so a load balancer or a test can wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from planner.router.backends import Backends
from planner.router.proxy import Proxy, error_body
from planner.telemetry import RouterMetrics
from planner.types import Mode

REFRESH_S = 0.2
FORWARDED_HEADERS = ("authorization",)


def create_router_app(targets_file: Path, mode: Mode, metrics: RouterMetrics | None = None, *,
                      read_timeout_s: float = 600.0, max_attempts: int = 3) -> FastAPI:
    metrics = metrics or RouterMetrics()
    backends = Backends(targets_file, metrics)
    holder: dict[str, Proxy] = {}

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
            watcher = asyncio.create_task(_watch(backends))
            try:
                yield
            finally:
                watcher.cancel()

    app = FastAPI(title="planner router", lifespan=lifespan)
    app.state.backends = backends
    app.state.metrics = metrics
    _openai_routes(app, holder, metrics)
    _operator_routes(app, backends, metrics, mode, holder, targets_file)
    return app


def _openai_routes(app: FastAPI, holder: dict[str, Proxy], metrics: RouterMetrics) -> None:
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


async def _watch(backends: Backends) -> None:
    while True:
        backends.refresh()
        await asyncio.sleep(REFRESH_S)
