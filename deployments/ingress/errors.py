"""The ingress's errors: raised as exceptions, answered by one handler per API's error shape.

Two APIs share the app, each with its own error body:

- gym-serve's (`/run`, `/v1/rollouts`, `/v1/weights`, ...): `{"error": "message", "field": ..., ...}` (`field`
  names the offending part of the request);
- OpenAI's (`/v1/responses`, `/v1/chat/completions`, tagged `OPENAI`): `{"error": {"message", "type", "param",
  "code"}}`, which the official clients read (`param` is the field).

A route raises `IngressError`; a body FastAPI itself refuses (not JSON, a field out of range) is a 400 naming
the field, or for text that is not JSON, the line and column; what Starlette answers itself (an unknown path,
a method a route does not take, a body FastAPI could not read at all) comes in the same shape. Each is answered
in the shape of the route's API. 409 and 429 say when to come back (`Retry-After`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException  # what Starlette's router and FastAPI's body reading raise

from gym_serve.wire.pieces import field_path

__all__ = ["OPENAI", "ErrorBody", "IngressError", "OpenAIErrorBody", "install_handlers", "responses"]

OPENAI = "OpenAI-compatible"
"""The tag of the routes that speak OpenAI's API (and its error shape)."""


class Problem(BaseModel):
    field: str
    error: str


class ErrorBody(BaseModel):
    """gym-serve's error body."""

    error: str
    field: str | None = None
    problems: list[Problem] | None = None


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    """OpenAI's error body."""

    error: OpenAIErrorDetail


class IngressError(Exception):
    """Raised by a route to answer `status`: the message, the `field` it is about, and any other `details`.

    It is answered in the shape of the route's API (`install_handlers`).
    """

    def __init__(self, status: int, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.details = details

    def __repr__(self) -> str:
        return f"IngressError({self.status!r}, {self.message!r}, field={self.field!r})"


def responses(*statuses: int, openai: bool = False) -> dict[int | str, dict[str, Any]]:
    """The error answers a route declares in its OpenAPI schema."""
    model = OpenAIErrorBody if openai else ErrorBody
    return {status: {"model": model, "description": _DESCRIPTIONS[status]} for status in statuses}


_DESCRIPTIONS = {
    400: "The request body is not valid JSON, or a field is out of range.",
    401: "The bearer token is missing or wrong.",
    403: "The operation needs a bearer token, and this ingress has none.",
    404: "An unknown agent, a model this ingress does not serve, or weights for a Model tier that takes none.",
    409: "The idempotency key's batch is still running, or the version is not new (retry after `Retry-After`).",
    413: "The body is over the ingress's size limit.",
    422: "A row, or the weights, do not fit (the body names the field).",
    429: "Saturated: accepting the request would put too many rollouts in flight (retry after `Retry-After`).",
    502: "The model tier failed (the message names the failure kind).",
    503: "The weight update failed on a replica.",
}


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(IngressError, _answer)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _refused_body)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _starlettes)  # type: ignore[arg-type]


async def _answer(request: Request, error: IngressError) -> JSONResponse:
    """The error in the shape of the API whose route raised it."""
    route = request.scope.get("route")
    if OPENAI in (getattr(route, "tags", None) or []):
        body = OpenAIErrorBody(error=OpenAIErrorDetail(message=error.message, param=error.field)).model_dump()
    else:
        body = ErrorBody(error=error.message, field=error.field).model_dump(exclude_none=True) | error.details
    headers = {"Retry-After": "1"} if error.status in (409, 429) else None
    return JSONResponse(body, status_code=error.status, headers=headers)


async def _refused_body(request: Request, error: RequestValidationError) -> JSONResponse:
    """FastAPI refused the body: 400 naming the first field that is wrong."""
    first = error.errors()[0]
    if first["type"] == "json_invalid":
        where = _line_and_column(error.body, first["loc"][1]) if len(first["loc"]) > 1 else ""
        return await _answer(request, IngressError(400, f"body is not valid JSON{where}: {first['ctx']['error']}"))
    field = field_path(first["loc"][1:]) or None  # the location's first part is FastAPI's "body"
    message = f"`{field}`: {first['msg']}" if field else str(first["msg"])
    return await _answer(request, IngressError(400, message, field=field))


def _line_and_column(text: Any, position: Any) -> str:
    """` at line L, column C` of a position in the body, text or bytes (a batch's rows one per line: the row's).

    >>> _line_and_column('{"rows": [\\n{"a": 1},\\n{"a": }]}', 27), _line_and_column(b"[\\n\\xff]", 2)
    (' at line 3, column 7', ' at line 2, column 1')
    """
    if not isinstance(text, str | bytes) or not isinstance(position, int):
        return f" at character {position}"
    newline = "\n" if isinstance(text, str) else b"\n"
    line = text.count(newline, 0, position) + 1  # type: ignore[arg-type]
    return f" at line {line}, column {position - text.rfind(newline, 0, position)}"  # type: ignore[arg-type]


async def _starlettes(request: Request, error: HTTPException) -> JSONResponse:
    """What Starlette or FastAPI answered by itself, in the route's shape; a body that could not be read is
    named by its cause (not UTF-8, nested past the parser's reach)."""
    message = str(error.detail)
    cause = error.__cause__
    if isinstance(cause, UnicodeDecodeError):
        message = f"body is not valid UTF-8{_line_and_column(cause.object, cause.start)}: {cause.reason}"
    elif isinstance(cause, RecursionError):
        message = "body is not valid JSON: nested too deeply to read"
    response = await _answer(request, IngressError(error.status_code, message))
    response.headers.update(error.headers or {})
    return response
