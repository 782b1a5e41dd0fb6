"""The planner's HTTP surface: /metrics (its registry), /healthz (alive), /readyz (signals present).

Readiness is *degraded* (503) while any signal the policy needs is missing, so a Kubernetes readiness
probe, an alert on ``planner_ready == 0`` and a human all see the same thing. The control loop owns the
SignalTracker and hands its latest status in through ``readiness``.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from planner.signals import SignalStatus


def readiness_body(status: SignalStatus | None) -> tuple[int, dict]:
    if status is None:
        return 503, {"status": "starting", "missing": [], "seconds_since_good": {}}
    body = {"status": "ready" if status.ready else "degraded", "missing": sorted(status.missing),
            "seconds_since_good": dict(status.seconds_since_good)}
    return (200 if status.ready else 503), body


def create_app(registry: CollectorRegistry, readiness: Callable[[], SignalStatus | None],
               title: str = "planner") -> FastAPI:
    app = FastAPI(title=title)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        code, body = readiness_body(readiness())
        return JSONResponse(body, status_code=code)

    return app
