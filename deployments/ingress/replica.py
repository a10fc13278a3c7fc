"""What one ingress replica holds, and what every request passes through before its route: auth and a size limit.

The routes take the replica's state (`Replica`) and the bearer-token check (`Authorized`) as FastAPI
dependencies. The token's value is never in the config, only the name of its variable (`token_env`): a
replica reads that variable, or, on a cluster whose nodes lack it, the value the deployer published in the
cluster's key-value store (`gym_serve.serving.secrets`). An ingress asked for auth (`require_token`, which a
deployer holding the token sets) that finds no token refuses to start. Bodies over `max_body_bytes` are
refused (413) as they arrive (`JSONBodies`), before they are held in memory whole.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from ray import serve
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gym_serve.collect.attempts import RetryPolicy
from gym_serve.collect.dispatch import Dispatcher
from gym_serve.deployments.ingress.errors import ErrorBody, IngressError
from gym_serve.deployments.ingress.idempotency import IdempotencyCache
from gym_serve.deployments.ingress.metrics import RolloutMetrics
from gym_serve.deployments.ingress.slots import Slots
from gym_serve.errors import ConfigError
from gym_serve.models.weights import PolicyWeights
from gym_serve.serving import secrets
from gym_serve.wire.jsonl import NotJSON, strict_loads

if TYPE_CHECKING:
    from gym_serve.deployments.ingress.batches import Batch

__all__ = ["Authorized", "CurrentReplica", "IngressArgs", "JSONBodies", "Replica", "StrictJSON"]


class IngressArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: list[str] = Field(description="Agent applications rows may route to (by `agent_ref.name`).")
    default_agent: str | None = None
    model_app: str | None = Field(default=None, description="The application whose Model tier /v1/* serves.")
    token_env: str = Field(
        default="GYM_SERVE_TOKEN", description="The bearer token's variable (its value is never in the config)."
    )
    require_token: bool = Field(
        default=False,
        description="Refuse to start without a token (set by a deployer that holds one; set it for clusters).",
    )
    max_in_flight: int = Field(default=4096, ge=1)
    max_body_bytes: int = Field(default=32 << 20, ge=1024)
    max_attempts: int = Field(default=3, ge=1)
    rollout_deadline_s: float = Field(
        default=900.0,
        gt=0,
        validation_alias=AliasChoices("rollout_deadline_s", "rollout_timeout_s"),
        description="Deadline of one rollout, retries included.",
    )
    idempotency_ttl_s: float = Field(default=900.0, gt=0, description="How long a finished batch stays replayable.")
    idempotency_max_rollouts: int = Field(default=10_000, ge=0, description="Most rollout rows kept for replay.")


class Replica:
    """One ingress replica's state: its token, its in-flight slots, its dispatcher, its running batches (by id),
    idempotency cache and metrics."""

    def __init__(self, args: IngressArgs) -> None:
        self.args = args
        self.token = secrets.lookup(args.token_env)
        if args.require_token and self.token is None:
            raise ConfigError(
                f"this ingress requires a bearer token, but `{args.token_env}` is neither in its replica's "
                "environment nor published on the cluster: deploy with the variable set (`gym-serve up` publishes "
                "it) or set it on every node",
                key="require_token",
            )
        self.slots = Slots(args.max_in_flight)
        self.dispatcher = Dispatcher(
            args.agents,
            default_agent=args.default_agent,
            policy=RetryPolicy(max_attempts=args.max_attempts, deadline_s=args.rollout_deadline_s),
            max_in_flight=args.max_in_flight,
        )
        self.batches: dict[str, Batch] = {}
        self.idempotency = IdempotencyCache(ttl_s=args.idempotency_ttl_s, max_rollouts=args.idempotency_max_rollouts)
        self.metrics = RolloutMetrics(lambda: self.slots.in_flight, replica=_replica_id())
        self._weights: PolicyWeights | None = None

    def model_app(self) -> str:
        """The application whose Model tier this ingress serves; 404 when it serves none."""
        if self.args.model_app is None:
            raise IngressError(404, "this ingress serves no model (set `model_app`)")
        return self.args.model_app

    def weights(self) -> PolicyWeights:
        if self._weights is None:
            self._weights = PolicyWeights(self.model_app())
        return self._weights


async def _replica(request: Request) -> Replica:
    """The replica's state (async: FastAPI runs a plain function dependency in its thread pool, a thread hop on
    every request that cost the ingress ~40 % of its time refusing an overload)."""
    replica: Replica = request.app.state.replica
    return replica


CurrentReplica = Annotated[Replica, Depends(_replica)]

_bearer = HTTPBearer(auto_error=False, description="The ingress's token (the value of its `token_env`).")


async def _authorized(
    replica: CurrentReplica, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    if replica.token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), replica.token.encode()):
        raise IngressError(401, "missing or wrong bearer token")


Authorized = Depends(_authorized)
"""The bearer token, when the ingress has one (every route but `/healthz` needs it)."""


async def _strict_json(request: Request) -> None:
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    try:
        strict_loads(await request.body())
    except NotJSON as e:
        raise IngressError(400, f"body is not valid JSON: {e}", field=e.field) from None
    except ValueError:
        pass  # what FastAPI's own reading already refused, or would (and answers with the line and column)


StrictJSON = Depends(_strict_json)
"""A body is JSON as a file's rows are (`gym_serve.wire.jsonl.strict_loads`): a key given twice, `NaN` and the
infinities are refused with the field they are in, where FastAPI's reading would keep the last key, or hand
a NaN on to a rollout whose answer could then not be written as JSON (a 500)."""


class JSONBodies:
    """ASGI middleware: bodies up to the replica's `max_body_bytes`, read as JSON whatever their declared type.

    A body over the limit is refused (413) as its bytes arrive, before it is held whole; one within it is
    handed on as `application/json` (the ingress takes nothing else, and clients that send JSON as plain bytes,
    curl's default, have always been understood).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = scope["app"].state.replica.args.max_body_bytes
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        declared = int(dict(headers).get(b"content-length", b"0") or 0)
        if declared > limit:
            await _too_large(f"body of {declared} bytes is over the limit of {limit}")(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > limit:
                await _too_large(f"body is over the limit of {limit} bytes")(scope, receive, send)
                return
        whole: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            if whole:
                return whole.pop()
            return await receive()  # after the body: what the connection says next (a disconnect)

        scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, replay, send)


def _too_large(message: str) -> JSONResponse:
    return JSONResponse(ErrorBody(error=message).model_dump(exclude_none=True), status_code=413)


def _replica_id() -> str:
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # not in a replica (a test builds the state directly)
        return "local"
