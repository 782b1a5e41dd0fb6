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


def desired_router(stores: DesiredStore | DesiredStores, published: Mapping[str, bool] | None = None) -> APIRouter:
    """``published``: per policy, whether its N is what KEDA/the HPA act on (actuator kinds keda, hpa; the
    default) or only what the planner decided (another kind: dry-run's advice, or what it scaled itself).
    Answered as ``"published"`` beside ``"desired"``."""
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
            return JSONResponse({"error": "no decision yet", "pool": pool,  # type: ignore[return-value]
                                 "policy": store.policy}, status_code=503)
        return {"desired": n, "pool": pool, "policy": store.policy,
                "published": True if published is None else published.get(store.policy, True)}

    return router
