"""The HTTP server of one Gateway replica: its sessions' APIs, served directly (not through Serve's proxy).

    POST /sessions/<id>/v1/chat/completions     OpenAI Chat Completions (stream or not)
    POST /sessions/<id>/v1/responses            OpenAI Responses (stream or not)
    POST /sessions/<id>/v1/messages             Anthropic Messages (stream or not)
    GET  /sessions/<id>/v1/models[/<model>]     the session's model (OpenAI's list shape, or Anthropic's)

A harness reaches only these routes, and only its own session's: a session is named by its URL and guarded
by its key (`Authorization: Bearer` or `x-api-key`). Every other path is a 404. A request is checked in
order: its session exists and is open (404), its key is that session's (401), its body is within the
size limit (413), the session is within its call budget (429 with `Retry-After`), its body is JSON the API
takes (400 naming the field); then the Model tier is called (502 naming the failure kind when it fails).
Every error comes in the shape of the API called: OpenAI's `{"error": {message, type, param, code}}`, or
Anthropic's `{"type": "error", "error": {type, message}}`.

One Serve request costs about a millisecond of CPU; a harness's call costs this server's HTTP handling and
one micro-batched handle call to the Model tier (`gym_serve.calls.handles.ModelHandle`), shared with the
calls of every other session here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from gym_serve.deployments.gateway.sessions import Session, Throttled, TierFailed
from gym_serve.rollout.loop import ModelClient
from gym_serve.wire.anthropic import anthropic_error
from gym_serve.wire.gateway import API, Refused
from gym_serve.wire.streaming import anthropic_events, chat_chunks, responses_events

__all__ = ["gateway_app"]

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    502: "server_error",
}

_EVENT_STREAM = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class HTTPProblem(Exception):
    """Raised while handling a request: answered with `status` in the API's error shape."""

    def __init__(self, status: int, message: str, *, field: str | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.retry_after_s = retry_after_s


def gateway_app(sessions: dict[str, Session], model: ModelClient, max_body_bytes: int) -> web.Application:
    """The aiohttp application serving `sessions` (a dict the replica adds to and removes from)."""
    app = web.Application(client_max_size=max_body_bytes + 1)

    def handler(api: API | None, fn: Callable[..., Any]) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            shape = api or ("anthropic" if _anthropic_client(request) else "chat")
            try:
                session = _session(request, sessions)
                return await fn(request, session, shape)
            except HTTPProblem as problem:
                return _error(shape, problem)

        return handle

    async def call(request: web.Request, session: Session, api: API) -> web.StreamResponse:
        body = await _body(request, max_body_bytes)
        try:
            session.admit()
        except Throttled as e:
            raise HTTPProblem(429, str(e), retry_after_s=e.retry_after_s) from None
        stream = bool(body.get("stream"))
        try:
            answer = await session.call(api, body, model, stream=stream)
        except Refused as e:
            raise HTTPProblem(e.status, str(e), field=e.field) from None
        except TierFailed as e:
            raise HTTPProblem(502, str(e)) from None
        if not stream:
            return web.Response(body=orjson.dumps(answer), content_type="application/json")
        if api == "chat":
            events = chat_chunks(answer, usage=bool((body.get("stream_options") or {}).get("include_usage")))
        elif api == "responses":
            events = responses_events(answer)
        else:
            events = anthropic_events(answer)
        # The whole event stream is ready: one response, written at once with its headers (a chunked stream
        # would cost a write for the headers, one for the events and one for its end).
        return web.Response(body=b"".join(events), headers=_EVENT_STREAM)

    async def models(request: web.Request, session: Session, api: API) -> web.StreamResponse:
        wanted = request.match_info.get("model")
        if wanted is not None and wanted != session.spec.model:
            raise HTTPProblem(404, f"this session serves model `{session.spec.model}`, not `{wanted}`", field="model")
        return web.Response(body=orjson.dumps(_model_list(session.spec.model, api, one=wanted is not None)),
                            content_type="application/json")  # fmt: skip

    async def unknown(request: web.Request, session: Session, api: API) -> web.StreamResponse:
        raise HTTPProblem(404, f"no route `{request.method} {request.path}` (a session serves only its model APIs)")

    prefix = "/sessions/{session}/v1"
    app.router.add_post(f"{prefix}/chat/completions", handler("chat", call))
    app.router.add_post(f"{prefix}/responses", handler("responses", call))
    app.router.add_post(f"{prefix}/messages", handler("anthropic", call))
    app.router.add_get(f"{prefix}/models", handler(None, models))
    app.router.add_get(prefix + "/models/{model}", handler(None, models))
    app.router.add_route("*", "/sessions/{session}/{tail:.*}", handler(None, unknown))

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        shape: API = "anthropic" if _anthropic_client(request) else "chat"
        return _error(shape, HTTPProblem(404, f"no route `{request.method} {request.path}`"))

    app.router.add_route("*", "/{tail:.*}", elsewhere)
    return app


def _anthropic_client(request: web.Request) -> bool:
    return "anthropic-version" in request.headers or "x-api-key" in request.headers


def _session(request: web.Request, sessions: dict[str, Session]) -> Session:
    """The request's session, open, and the request holding its key."""
    session = sessions.get(request.match_info["session"])
    if session is None:
        raise HTTPProblem(404, "no such session: it ended or never existed")
    given = request.headers.get("x-api-key") or request.headers.get("api-key") or ""
    authorization = request.headers.get("Authorization", "")
    if not given and authorization.lower().startswith("bearer "):
        given = authorization[7:].strip()
    if not given or not session.authorized(given):
        raise HTTPProblem(401, "missing or wrong key for this session")
    session.touched = time.monotonic()
    return session


async def _body(request: web.Request, limit: int) -> dict[str, Any]:
    """The JSON object the request carries, read no further than `limit` bytes."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise HTTPProblem(413, f"the body of {declared} bytes is over this gateway's limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise HTTPProblem(413, f"the body is over this gateway's limit of {limit} bytes")
        chunks.append(chunk)
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as e:
        raise HTTPProblem(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise HTTPProblem(400, "the body must be a JSON object")
    return body


def _error(api: API, problem: HTTPProblem) -> web.Response:
    if api == "anthropic":
        body = anthropic_error(problem.status, problem.message)
    else:
        detail = {"message": problem.message, "type": _OPENAI_TYPES.get(problem.status, "server_error")}
        body = {"error": {**detail, "param": problem.field, "code": None}}
    headers = {"Retry-After": f"{max(1, round(problem.retry_after_s))}"} if problem.retry_after_s is not None else {}
    return web.Response(
        body=orjson.dumps(body), status=problem.status, content_type="application/json", headers=headers
    )


def _model_list(model: str, api: API, *, one: bool) -> dict[str, Any]:
    entry: dict[str, Any]
    if api == "anthropic":
        entry = {"type": "model", "id": model, "display_name": model, "created_at": "2025-01-01T00:00:00Z"}
        return entry if one else {"data": [entry], "has_more": False, "first_id": model, "last_id": model}
    entry = {"id": model, "object": "model", "created": 0, "owned_by": "gym-serve"}
    return entry if one else {"object": "list", "data": [entry]}
