"""HTTP API (contract) of `planner serve`: submit, follow, fetch artifacts, cancel. OpenAPI at /openapi.json.

    POST   /v1/profile-requests                      202 {id, status}; 422 with field messages
    GET    /v1/profile-requests                      every request's id and status
    GET    /v1/profile-requests/{id}                 {id, spec, status}
    GET    /v1/profile-requests/{id}/artifacts       names (once Ready)
    GET    /v1/profile-requests/{id}/artifacts/{name}  profile.json, policy.yaml, result.json, manifests/...
    DELETE /v1/profile-requests/{id}                 202: cancelling (it ends Failed/Cancelled, no artifacts);
                                                     200: a finished request and its artifacts removed
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from planner import __version__
from planner.http_errors import add_handlers
from planner.requests.manager import RequestManager, View
from planner.requests.spec import FieldError, ProfileRequestSpec, RequestInvalid
from planner.requests.status import Phase, Status

PREFIX = "/v1/profile-requests"
MEDIA = {".json": "application/json", ".yaml": "application/yaml"}


class Accepted(BaseModel):
    id: str
    status: Status


class RequestView(BaseModel):
    id: str
    spec: ProfileRequestSpec
    status: Status


class ArtifactList(BaseModel):
    id: str
    artifacts: list[str]


class Deleted(BaseModel):
    id: str
    deleted: bool


def _view(view: View) -> RequestView:
    return RequestView(id=view.id, spec=view.spec, status=view.status)


def _found(manager: RequestManager, request_id: str) -> View:
    view = manager.get(request_id)
    if view is None:
        raise HTTPException(404, f"no profile request {request_id!r}")
    return view


def _invalid(exc: RequestInvalid) -> JSONResponse:
    detail = [{**d, "field": ".".join(map(str, d["loc"][1:]))} for d in exc.detail()]
    return JSONResponse({"detail": detail}, status_code=422)


def create_requests_app(manager: RequestManager) -> FastAPI:
    app = FastAPI(title="planner profile requests", version=__version__,
                  description="Model + hardware + workload + SLA in; measured profile, TP per stage, replicas, "
                              "aggregated-vs-disaggregated advice, a controller policy and manifests out.")
    add_handlers(app)

    @app.post(PREFIX, status_code=202, response_model=Accepted, responses={422: {"description": "bad fields"}})
    def submit(spec: ProfileRequestSpec) -> Any:
        try:
            if spec.auto_apply:
                raise RequestInvalid([FieldError("auto_apply", "applies to ProfileRequest objects in a cluster "
                                                 "(the watch namespace of planner serve); a request over HTTP "
                                                 "renders the manifests for you to apply")])
            view = manager.submit(spec)
        except RequestInvalid as exc:
            return _invalid(exc)
        return JSONResponse(Accepted(id=view.id, status=view.status).model_dump(mode="json"), status_code=202,
                            headers={"Location": f"{PREFIX}/{view.id}"})

    @app.get(PREFIX, response_model=list[Accepted])
    def list_requests() -> list[Accepted]:
        return [Accepted(id=v.id, status=v.status) for v in manager.views()]

    @app.get(PREFIX + "/{request_id}", response_model=RequestView)
    def get_request(request_id: str) -> RequestView:
        return _view(_found(manager, request_id))

    @app.get(PREFIX + "/{request_id}/artifacts", response_model=ArtifactList)
    def list_artifacts(request_id: str) -> ArtifactList:
        view = _found(manager, request_id)
        if view.status.phase is not Phase.READY:
            raise HTTPException(409, f"profile request {request_id} is {view.status.phase.value}: artifacts exist "
                                "only once it is Ready")
        return ArtifactList(id=request_id, artifacts=manager.store.artifact_names(request_id))

    @app.get(PREFIX + "/{request_id}/artifacts/{name:path}", response_class=Response,
             responses={200: {"content": {"application/json": {}, "application/yaml": {}}}})
    def get_artifact(request_id: str, name: str) -> Response:
        view = _found(manager, request_id)
        content = manager.store.read_artifact(request_id, name) if view.status.phase is Phase.READY else None
        if content is None:
            raise HTTPException(404, f"profile request {request_id} has no artifact {name!r} "
                                f"({view.status.phase.value})")
        suffix = name[name.rfind("."):] if "." in name else ""
        return Response(content, media_type=MEDIA.get(suffix, "application/octet-stream"))

    @app.delete(PREFIX + "/{request_id}", responses={202: {"model": Accepted}, 200: {"model": Deleted}})
    def delete_request(request_id: str) -> JSONResponse:
        view = _found(manager, request_id)
        if not view.status.phase.terminal:
            status = manager.cancel(request_id) or view.status
            return JSONResponse(Accepted(id=request_id, status=status).model_dump(mode="json"), status_code=202)
        manager.delete(request_id)
        return JSONResponse(Deleted(id=request_id, deleted=True).model_dump(), status_code=200)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app

