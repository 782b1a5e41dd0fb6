"""HTTP 422s for every app that takes a JSON body: each bad field named, with what is allowed.

FastAPI's own handler echoes each field's input back; a body with ``NaN``, ``Infinity`` or ``1e400`` (JSON
parsers read them as floats) then cannot be rendered as JSON, and the client gets a 500 for its own bad
input. This one says the same without the echo: ``loc``, ``msg`` naming the value, ``type`` and ``field``.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from planner.requests.spec import error_message


def validation_error(_: Request, exc: Exception) -> JSONResponse:
    """Structural errors in the same shape as semantic ones: loc, msg naming the value, type, field."""
    assert isinstance(exc, RequestValidationError)
    detail = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        field = ".".join(str(p) for p in loc[1:]) or "body"
        detail.append({"loc": loc, "msg": error_message(err), "type": err.get("type", "value_error"), "field": field})
    return JSONResponse({"detail": detail}, status_code=422)
