"""The controller's HTTP API, one server for every policy the process runs (OpenAPI at /openapi.json).

- ``GET /metrics``, ``/healthz``, ``/readyz`` (every policy's signals, plus problems such as a Lease that
  cannot be taken), ``GET /v1/desired`` (KEDA's metrics-api trigger);
- ``GET /v1/policies``: what runs, its bounds, who leads, whether it is ready;
- ``GET /v1/decisions?policy=&since=&limit=``: recent decisions with reasons, inputs and forecasts (a
  bounded ring buffer per policy);
- ``GET /v1/fleet`` (``planner run --fleet``): the GPU budget and the last tick's GPUs wanted, granted and
  in use, per policy with the reason it got less (404 without a fleet);
- ``POST /v1/plan``: what-if sizing (planner.decide.whatif.plan) for a given load, no side effects;
- ``POST /v1/wake``: the router's wake signal (`planner route --wake-url`): it holds requests for a policy
  with no replica in rotation. The next read counts them as traffic, and a policy at zero ticks at once (its
  loop, or its fleet) instead of at its next grid point (service/wake.py).

Authentication: a bearer token (``--api-token-file``) guards every request that is not a GET. ``POST /v1/wake``
can only wake a policy that may sleep (a scale-up to one replica per pool). ``POST /v1/plan`` is read-only, but it runs the sizing model on
the CPU the control loop shares, so a flood of what-ifs could delay ticks: it is treated like a write and
needs the token when one is configured. GETs stay open: Prometheus and KEDA read them without credentials.
Without a token file the POST is open and the service logs so at start.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from planner.actuators.desired import DesiredStores
from planner.actuators.keda_http import ERROR, desired_router
from planner.actuators.registry import REGISTRY
from planner.http_errors import add_handlers
from planner.service.decisions import decision_json
from planner.types import MAX_TOKENS

MAX_RATE_RPS = 10_000_000


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str | None = Field(None, description="policy name; may be left out when the controller runs one")
    rate_rps: float = Field(ge=0, le=MAX_RATE_RPS, allow_inf_nan=False, description="requests per second")
    isl_tokens: float = Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False, description="mean input length")
    osl_tokens: float = Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False, description="mean output length")


class WakeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str | None = Field(None, description="policy name; may be left out when the controller runs one")
    waiting: int = Field(1, ge=1, le=MAX_RATE_RPS, description="requests the router holds for it")


class WakeResponse(BaseModel):
    policy: str
    tick_now: bool = Field(description="true: the policy may sleep and a pool is at zero, so it ticks at once; "
                           "false: the requests count at its next tick")


class PlanResponse(BaseModel):
    policy: str
    feasible: bool
    decision: dict[str, Any]


class FleetPolicy(BaseModel):
    wanted_gpus: int = Field(description="GPUs the policy decided alone")
    granted_gpus: int = Field(description="GPUs the fleet granted it")
    wanted: dict[str, int]
    granted: dict[str, int]
    reason: str | None = Field(description="fleet_priority, fleet_wake or fleet_share when it got less; null "
                                                 "otherwise")


class FleetResponse(BaseModel):
    budget_gpus: int
    interval_s: float
    in_use_gpus: float | None = Field(description="GPUs of the ready replicas observed (null: not every policy "
                                      "had data)")
    priorities: dict[str, int]
    at_s: float | None = Field(description="the last fleet tick (null before the first)")
    used_gpus: int | None = Field(description="GPUs granted, every policy together")
    wanted_gpus: int | None
    binds: bool | None = Field(description="whether the policies wanted more than the budget")
    policies: dict[str, FleetPolicy]


class DecisionsResponse(BaseModel):
    decisions: list[dict[str, Any]]


class PolicyInfo(BaseModel):
    name: str
    mode: str
    interval_s: float
    actuator: str
    leader: bool | None = Field(description="null without leader election")
    ready: bool
    sla: dict[str, float]
    pools: dict[str, dict[str, Any]]


def bearer_guard(token: str | None) -> Callable[..., Any]:
    scheme = HTTPBearer(auto_error=False, description="--api-token-file")

    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(scheme)) -> None:
        if token is None:
            return
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "a valid bearer token is required (Authorization: Bearer <token>)",
                                headers={"WWW-Authenticate": "Bearer"})

    return check


def readiness(loops: Sequence[Any]) -> tuple[int, dict[str, Any]]:
    """/readyz: 200 when every policy has seen every signal it needs, none is missing, and there is no problem
    (a Lease that cannot be taken, ...); "starting" (503) until each signal was seen once."""
    missing: list[str] = []
    ages: dict[str, float | None] = {}
    problems: dict[str, str] = {}
    starting = False
    for loop in loops:
        status = loop.monitor.status()
        prefix = f"{loop.name}:" if len(loops) > 1 else ""
        problems.update({f"{prefix}{k}": v for k, v in loop.monitor.problems.items()})
        starting = starting or loop.monitor.starting  # the monitor's own test, as /v1/policies' "ready" uses
        if status is None:
            continue
        missing += [f"{prefix}{s}" for s in sorted(status.missing)]
        ages.update({f"{prefix}{s}": age for s, age in status.seconds_since_good.items()})
    word = "degraded" if missing or problems else ("starting" if starting else "ready")
    body = {"status": word, "missing": missing, "seconds_since_good": ages, "problems": problems}
    return (200 if word == "ready" else 503), body


def policy_info(loop: Any) -> dict[str, Any]:
    p = loop.policy
    elector = loop.elector
    pools = {}
    for name in p.pool_names():
        spec = p.pool(name)
        target = spec.target
        pools[str(name)] = {"min_replicas": spec.min_replicas, "max_replicas": spec.max_replicas,
                            "target": None if target is None else f"{target.kind} {target.namespace}/{target.name}",
                            "desired": loop.store.get(name)}
    return {"name": p.name, "mode": str(p.mode), "interval_s": float(p.interval_s), "actuator": loop.actuator_kind,
            "leader": None if elector is None else bool(elector.is_leader), "ready": loop.monitor.ready,
            "sla": {"ttft_ms": float(p.sla.ttft_ms), "itl_ms": float(p.sla.itl_ms),
                    "percentile": float(p.sla.percentile)},
            "pools": pools}


def create_service_app(loops: Sequence[Any], token: str | None = None, title: str = "planner",
                       fleet: Any = None) -> FastAPI:
    """The app for ``loops`` (service.loop.ControlLoop, one per policy, sharing one metrics registry);
    ``fleet``: the service.fleet_loop.FleetLoop over them (``planner run --fleet``), None without one."""
    by_name = {loop.name: loop for loop in loops}
    app = FastAPI(title=title, version="1", description=__doc__)
    add_handlers(app)
    _health_routes(app, loops)
    # Every actuator kind answers /v1/desired: keda and hpa with what they publish, the others (dry-run: the
    # advisory overlay) with what the loop decided, marked "published": false.
    publishes = {loop.name: REGISTRY[loop.actuator_kind].publishes for loop in loops}
    served = DesiredStores([loop.store if publishes[loop.name] else loop.decided for loop in loops])
    app.include_router(desired_router(served, publishes))

    def pick(policy: str | None) -> Any:
        if policy is None and len(by_name) == 1:
            return next(iter(by_name.values()))
        if policy in by_name:
            return by_name[policy]
        raise HTTPException(404, f"unknown policy {policy!r}; allowed: {', '.join(by_name)}" if policy else
                            f"several policies run here: name one ({', '.join(by_name)})")

    @app.get("/v1/policies", response_model=list[PolicyInfo], tags=["api"])
    async def policies() -> list[dict[str, Any]]:
        return [policy_info(loop) for loop in loops]

    @app.get("/v1/decisions", response_model=DecisionsResponse, tags=["api"], responses={404: ERROR})
    async def decisions(policy: str | None = Query(None, description="policy name (all when left out)"),
                        since: float | None = Query(None, description="epoch seconds: decisions at or after"),
                        limit: int | None = Query(None, ge=1, le=100_000, description="the newest N only"),
                        ) -> dict[str, Any]:
        chosen = [pick(policy)] if policy is not None else list(loops)
        if since is not None and not math.isfinite(since):
            raise RequestValidationError([{"loc": ("query", "since"), "msg": "must be a finite number",
                                           "type": "value_error", "input": since}])
        since_s = since
        records = sorted((r for loop in chosen for r in loop.decisions.since(since_s)), key=lambda r: r["at_s"])
        return {"decisions": records[-limit:] if limit else records}

    @app.post("/v1/plan", response_model=PlanResponse, tags=["api"], dependencies=[Depends(bearer_guard(token))],
              responses={401: ERROR, 404: ERROR})
    def plan(body: PlanRequest) -> dict[str, Any]:  # sync: FastAPI runs it in a worker thread
        from planner.decide.whatif import plan as what_if
        from planner.types import Reason

        loop = pick(body.policy)
        profile = loop.profile or _profile(loop.policy)
        decision = what_if(loop.policy, profile, body.rate_rps, body.isl_tokens, body.osl_tokens)
        return {"policy": loop.name, "feasible": Reason.SLA_INFEASIBLE not in decision.reasons,
                "decision": decision_json(decision)}

    _fleet_and_wake_routes(app, pick, fleet, token)
    return app


def _fleet_and_wake_routes(app: FastAPI, pick: Callable[[str | None], Any], fleet: Any, token: str | None) -> None:
    """GET /v1/fleet (404 without a fleet) and POST /v1/wake (the router's signal; the fleet ticks when there is
    one, else the woken policy's loop)."""

    @app.get("/v1/fleet", response_model=FleetResponse, tags=["api"], responses={404: ERROR})
    async def fleet_state() -> dict[str, Any]:
        """The fleet's budget and its last tick: per policy GPUs wanted vs granted and the reason it got less."""
        if fleet is None:
            raise HTTPException(404, "this controller runs no fleet (it was started without a fleet file)")
        return dict(fleet.summary())

    @app.post("/v1/wake", response_model=WakeResponse, tags=["api"], dependencies=[Depends(bearer_guard(token))],
              responses={401: ERROR, 404: ERROR})
    async def wake(body: WakeRequest) -> dict[str, Any]:
        """The router holds requests for this policy: count them, and wake a policy at zero now."""
        loop = pick(body.policy)
        now = loop.wake(body.waiting)
        if now:
            (fleet if fleet is not None else loop).wake_signal.event.set()
        return {"policy": loop.name, "tick_now": now}


def _profile(policy: Any) -> Any:
    from planner.profile import load_profile

    return load_profile(policy.profile)


def _health_routes(app: FastAPI, loops: Sequence[Any]) -> None:
    registry = loops[0].metrics.registry

    @app.get("/metrics", response_class=PlainTextResponse, tags=["health"],
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: ERROR})
    async def readyz() -> JSONResponse:
        code, body = readiness(loops)
        return JSONResponse(body, status_code=code)
