"""KEDA ``metrics-api`` trigger endpoint: ``GET /v1/desired?pool=decode`` -> ``{"desired": N, ...}``.

The ScaledObject reads it with ``valueLocation: desired`` and ``targetValue: "1"`` (AverageValue). Before
the first decision, or for an unknown pool, it answers an error status: KEDA then counts a failure and its
``fallback`` applies; serving 0 instead would scale the pool down on no information.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from planner.actuators.desired import DesiredStore


def desired_router(store: DesiredStore, silent_because: str | None = None) -> APIRouter:
    """``silent_because``: why nothing is ever published (an actuator kind that acts itself), said in the 503."""
    router = APIRouter()

    @router.get("/v1/desired")
    async def desired(pool: str = Query(..., description="pool name from the policy")) -> JSONResponse:
        if pool not in store.pools:
            return JSONResponse({"error": f"unknown pool {pool!r}; allowed: {', '.join(store.pools)}",
                                 "policy": store.policy}, status_code=404)
        n = store.get(pool)
        if n is None:
            return JSONResponse({"error": silent_because or "no decision yet", "pool": pool, "policy": store.policy},
                                status_code=503)
        return JSONResponse({"desired": n, "pool": pool, "policy": store.policy})

    return router
