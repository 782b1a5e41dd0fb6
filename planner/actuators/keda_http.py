"""KEDA ``metrics-api`` trigger endpoint: ``GET /v1/desired?pool=decode`` -> ``{"desired": N, ...}``.

The ScaledObject reads it with ``valueLocation: desired`` and ``targetValue: "1"`` (AverageValue). Before
the first decision, or for an unknown pool, it answers an error status: KEDA then counts a failure and its
``fallback`` applies; serving 0 instead would scale the pool down on no information. A controller running
several policies serves each under ``&policy=<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from planner.actuators.desired import DesiredStore, DesiredStores

ERROR = {"content": {"application/json": {"schema": {"type": "object"}}}}


def desired_router(stores: DesiredStore | DesiredStores,
                   silent_because: str | Mapping[str, str | None] | None = None) -> APIRouter:
    """``silent_because``: why nothing is ever published (an actuator kind that acts itself), said in the 503;
    a mapping gives it per policy."""
    router = APIRouter()
    all_stores = DesiredStores.of(stores)

    @router.get("/v1/desired", tags=["keda"], responses={404: ERROR, 503: ERROR})
    async def desired(pool: str = Query(..., description="pool name from the policy"),
                      policy: str | None = Query(None, description="policy name (needed with several)"),
                      ) -> dict[str, Any]:
        store = all_stores.pick(policy)
        if isinstance(store, str):
            return JSONResponse({"error": store}, status_code=404)  # type: ignore[return-value]
        if pool not in store.pools:
            return JSONResponse({"error": f"unknown pool {pool!r}; allowed: {', '.join(store.pools)}",  # type: ignore[return-value]
                                 "policy": store.policy}, status_code=404)
        n = store.get(pool)
        if n is None:
            why = silent_because.get(store.policy) if isinstance(silent_because, Mapping) else silent_because
            return JSONResponse({"error": why or "no decision yet", "pool": pool,  # type: ignore[return-value]
                                 "policy": store.policy}, status_code=503)
        return {"desired": n, "pool": pool, "policy": store.policy}

    return router
