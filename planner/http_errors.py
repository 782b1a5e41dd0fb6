"""HTTP 422s for every app that takes a JSON body: each bad field named, with what is allowed.

FastAPI's own handler echoes each field's input back; a body with ``NaN``, ``Infinity`` or ``1e400`` (JSON
parsers read them as floats) then cannot be rendered as JSON, and the client gets a 500 for its own bad
input. This one says the same without the echo: ``loc``, ``msg`` naming the value, ``type`` and ``field``.
A body that is not JSON is the body's error (FastAPI puts the character offset where a field goes), and one that
is not UTF-8 a 422 as well (FastAPI answers 400 "There was an error parsing the body").
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from planner.requests.spec import error_message


def validation_error(_: Request, exc: Exception) -> JSONResponse:
    """Structural errors in the same shape as semantic ones: loc, msg naming the value, type, field."""
    assert isinstance(exc, RequestValidationError)
    detail = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        if err.get("type") == "json_invalid":  # loc: ("body", character offset)
            at = f" at character {loc[1]}" if len(loc) > 1 else ""
            detail.append({"loc": ["body"], "msg": f"not valid JSON{at}", "type": "json_invalid", "field": "body"})
            continue
        field = ".".join(str(p) for p in loc[1:]) or "body"
        detail.append({"loc": loc, "msg": error_message(err), "type": err.get("type", "value_error"), "field": field})
    return JSONResponse({"detail": detail}, status_code=422)


async def unreadable_body(request: Request, exc: Exception) -> Response:
    """FastAPI's 400 for a body it could not decode (bytes that are not UTF-8): the body's 422."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        return JSONResponse({"detail": [{"loc": ["body"], "msg": "the body is not UTF-8 JSON", "type": "json_invalid",
                                         "field": "body"}]}, status_code=422)
    return await http_exception_handler(request, exc)


def add_handlers(app: FastAPI) -> None:
    """Both handlers on ``app``."""
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, unreadable_body)
