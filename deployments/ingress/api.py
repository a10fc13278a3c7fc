"""The HTTP ingress for external trainers: a FastAPI app served by Ray Serve.

- `POST /run`: one row in, one rollout row out (NeMo Gym's agent `/run` bodies).
- `POST /v1/rollouts`: rows × `num_repeats` (with sampling overrides); rollouts stream back as NDJSON lines as
  they finish, or as whole groups with `group_size`; a rollout that fails comes back as a failure line with
  its `_ng_failure_class`.
- `POST /v1/responses`, `POST /v1/chat/completions`: the Model tier, OpenAI-compatible (token ids, when the
  model gives them, stay on the items as extra fields).
- `GET /v1/environments`, `GET /healthz`, `GET /metrics` (Prometheus text, see `.prometheus` beside this module).
- `POST /v1/weights` (`{"version": N, "checkpoint": "/folder/of/safetensors"}`): new weights into every replica of
  the Model tier (`gym_serve.models.weights`); `GET /v1/weights`: the policy's version and each replica's.

Optional bearer-token auth: everything but `/healthz` needs the token. Its
value is never in the config, only the name of its variable (`token_env`): a
replica reads that variable, or, on a cluster whose nodes lack it, the value
the deployer published in the cluster's key-value store
(`gym_serve.serving.secrets`; `gym-serve up` with the variable set publishes
it). An ingress asked for auth (`require_token`, which a deployer holding the
token sets) that finds no token refuses to start. Weight updates always need
the token: without one configured, `POST /v1/weights` is refused (403). Bounded: bodies over
`max_body_bytes` get 413, and when accepting a request would put more than
`max_in_flight` rollouts in flight the answer is 429 with `Retry-After`.

Deadlines: every rollout (on `/run` and `/v1/rollouts`) must end within
`rollout_deadline_s`, retries included; one that does not comes back as a
failure row with `_ng_failure_class: agent_timeout`, and its work is cancelled.
Retries and failure rows are the rollout driver's (`gym_serve.collect.attempts`).
With `max_policy_lag`, a rollout sampled by too old a policy is run again, or
with `flag_stale` returned marked (`gym_serve.collect.staleness`).

Cancellation: when the client of `/v1/rollouts` goes away, Serve's proxy
cancels the request, the batch's unfinished rollouts are cancelled, their
in-flight slots come back at once, and the cancellation travels down the
handle calls (`gym_serve.calls.batching`) so the agent, model and environment
replicas stop working on them.

Idempotency: a `/v1/rollouts` request with an `idempotency_key` that repeats
an earlier request's replays the rollouts that finished then (header
`Idempotency-Replayed: N`) and runs only the others; a duplicate sent while
the first still streams gets 409 with `Retry-After`, and the same key with
another body 422 (`gym_serve.deployments.ingress.idempotency`, which also says why the cache is
per replica).
"""

import asyncio
import hashlib
import hmac
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from ray import serve
from starlette.types import Receive, Scope, Send

from gym_serve.calls.batching import MicroBatcher
from gym_serve.calls.handles import agent_batcher
from gym_serve.collect.attempts import RetryPolicy, run_attempts
from gym_serve.collect.staleness import Staleness
from gym_serve.collect.task_index import TaskIndex
from gym_serve.deployments.ingress.idempotency import IdempotencyCache, IdempotencyConflict, IdempotencyMismatch
from gym_serve.deployments.ingress.prometheus import RolloutMetrics
from gym_serve.errors import ConfigError, FailureKind, InvalidWeights, VersionNotNewer, WeightsError, failure_kind
from gym_serve.models.weights import PolicyWeights
from gym_serve.serving import secrets
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat
from gym_serve.wire.responses import row_problems

__all__ = ["IngressArgs", "build_ingress"]

app = FastAPI(title="gym-serve", docs_url=None, redoc_url=None)


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


class RolloutsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: list[dict[str, Any]] = Field(min_length=1)
    num_repeats: int = Field(default=1, ge=1)
    group_size: int | None = Field(default=None, ge=1, description="Send each task's rollouts together, in groups.")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_policy_lag: int | None = Field(
        default=None, ge=0, description="Run again a rollout whose oldest token is more policy versions old."
    )
    flag_stale: bool = Field(default=False, description="Return such rollouts marked `policy_stale` instead.")
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Re-sending a batch with its key replays what finished.",
    )


_NO_STREAMING = (
    "`stream: true` is not supported: the model tier answers whole responses; send the request without `stream` "
    "(with the openai client: stream=False, the default)"
)


def _openai_error(status: int, message: str, param: str | None) -> JSONResponse:
    """An error in OpenAI's shape, so the official client shows its message (it reads `error.message`)."""
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=status)


class WeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, description="The new policy version: above the current one.")
    checkpoint: str = Field(min_length=1, description="A folder of *.safetensors that every replica's node reads.")


def _model_failure(error: BaseException) -> JSONResponse:
    """A model call that failed: its failure kind and message in OpenAI's error shape (400 for bad input, else 502)."""
    kind = failure_kind(error)
    cause = getattr(error, "cause", None)
    message = str(cause if isinstance(cause, BaseException) else error).strip().splitlines()
    status = 400 if kind is FailureKind.BAD_INPUT else 502
    return _openai_error(
        status, f"the model tier failed ({kind.value}): {message[-1] if message else kind.value}", None
    )


def _invalid(error: ValidationError) -> JSONResponse:
    """A request body its model refused: 400 naming the first field that is wrong."""
    first = error.errors()[0]
    field = ".".join(map(str, first["loc"]))
    return _error(400, f"`{field}`: {first['msg']}", field=field)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(
        {"error": message, **extra}, status_code=status, headers={"Retry-After": "1"} if status in (409, 429) else None
    )


class _Batch:
    """The rollouts of one `/v1/rollouts` request: runs and streams them, and gives its slots back exactly once."""

    def __init__(
        self,
        ingress: "Ingress",
        work: list[tuple[str, dict[str, Any]]],
        group_size: int | None,
        key: str | None,
        replayed: dict[int, dict[str, Any]],
        staleness: Staleness | None = None,
    ) -> None:
        self.ingress = ingress
        self.staleness = staleness
        self.work = work
        self.group_size = group_size
        self.key = key
        self.replayed = replayed
        self.pending = {i for i in range(len(work)) if i not in replayed}  # admitted, not yet finished
        self.tasks: list[asyncio.Future[tuple[int, dict[str, Any]]]] = []
        self.closed = False

    async def stream(self) -> AsyncIterator[bytes]:
        groups: dict[Any, list[dict[str, Any]]] = {}
        try:
            for index in sorted(self.replayed):
                if (chunk := self._emit(groups, self.replayed[index])) is not None:
                    yield chunk
            self.tasks = [asyncio.ensure_future(self._one(i)) for i in sorted(self.pending)]
            for next_done in asyncio.as_completed(self.tasks):
                index, result = await next_done
                self.pending.discard(index)
                self.ingress.in_flight -= 1
                if self.key is not None and "_ng_failure_class" not in result:
                    self.ingress.idempotency.record(self.key, index, result)
                if (chunk := self._emit(groups, result)) is not None:
                    yield chunk
            for group in groups.values():  # groups smaller than group_size (num_repeats not a multiple)
                yield b"".join(json.dumps(r).encode() + b"\n" for r in group)
        finally:  # done, or the client went away: stop what is still running
            self.close()

    async def _one(self, index: int) -> tuple[int, dict[str, Any]]:
        return index, await self.ingress._run(*self.work[index], self.staleness)

    def _emit(self, groups: dict[Any, list[dict[str, Any]]], result: dict[str, Any]) -> bytes | None:
        if self.group_size is None:
            return json.dumps(result).encode() + b"\n"
        task = ((result.get("agent_ref") or {}).get("name"), result.get("_ng_task_index"))  # one agent's task
        group = groups.setdefault(task, [])
        group.append(result)
        if len(group) < self.group_size:
            return None
        del groups[task]
        return b"".join(json.dumps(r).encode() + b"\n" for r in group)

    def close(self) -> None:
        """Cancel unfinished rollouts and give back their slots (idempotent: the stream and the response call it)."""
        if self.closed:
            return
        self.closed = True
        for task in self.tasks:
            task.cancel()
        self.ingress.in_flight -= len(self.pending)
        for _ in self.pending:
            self.ingress.metrics.finished("cancelled")
        self.pending.clear()
        if self.key is not None:
            self.ingress.idempotency.end(self.key)


class _BatchResponse(StreamingResponse):
    """Streams a `_Batch` as NDJSON and closes it however the response ends.

    The stream's own `finally` does not run if the client goes away before the
    first line (the generator never started), so the response closes it too.
    """

    def __init__(self, batch: _Batch, headers: dict[str, str] | None = None) -> None:
        super().__init__(batch.stream(), media_type="application/x-ndjson", headers=headers)
        self._batch = batch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._batch.close()


def _replica_id() -> str:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # not in a replica (a unit test builds the class directly)
        return "local"


@serve.deployment(name="Ingress", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
@serve.ingress(app)
class Ingress:
    def __init__(self, args: IngressArgs | dict[str, Any]) -> None:
        self.args = args if isinstance(args, IngressArgs) else IngressArgs.model_validate(args)
        self._token = secrets.lookup(self.args.token_env)
        if self.args.require_token and self._token is None:
            raise ConfigError(
                f"this ingress requires a bearer token, but `{self.args.token_env}` is neither in its replica's "
                "environment nor published on the cluster: deploy with the variable set (`gym-serve up` publishes "
                "it) or set it on every node",
                key="require_token",
            )
        self._batchers: dict[str, MicroBatcher[dict[str, Any], dict[str, Any]]] = {}
        self.in_flight = 0
        self.idempotency = IdempotencyCache(
            ttl_s=self.args.idempotency_ttl_s, max_rollouts=self.args.idempotency_max_rollouts
        )
        self.metrics = RolloutMetrics(lambda: self.in_flight, replica=_replica_id())
        self._retry = RetryPolicy(max_attempts=self.args.max_attempts, deadline_s=self.args.rollout_deadline_s)
        self._rng = random.Random()
        self._weights: PolicyWeights | None = None

    # ---- plumbing ------------------------------------------------------------------------------------------

    def _unauthorized(self, request: Request) -> JSONResponse | None:
        if self._token is None:
            return None
        given = request.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {self._token}".encode()):
            return None
        return _error(401, "missing or wrong bearer token")

    async def _guard(self, request: Request) -> JSONResponse | dict[str, Any] | list[Any]:
        """Auth, size and JSON checks; returns the parsed body or the error response."""
        if (refused := self._unauthorized(request)) is not None:
            return refused
        declared = int(request.headers.get("content-length") or 0)
        if declared > self.args.max_body_bytes:
            return _error(413, f"body of {declared} bytes is over the limit of {self.args.max_body_bytes}")
        body = await request.body()
        if len(body) > self.args.max_body_bytes:
            return _error(413, f"body is over the limit of {self.args.max_body_bytes} bytes")
        try:
            return json.loads(body)
        except json.JSONDecodeError as e:
            return _error(400, f"body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")

    def _agent_of(self, row: Any, where: str = "") -> str | JSONResponse:
        """The row's agent, or the 4xx that names what is wrong with the row (validated here, once)."""
        problems = row_problems(row)
        if problems:
            fields = [f"{where}{field}" for field, _ in problems]
            message = "; ".join(f"`{f}`: {m}" for f, (_, m) in zip(fields, problems, strict=True))
            return _error(
                422,
                f"invalid row: {message}",
                field=fields[0],
                problems=[{"field": f, "error": m} for f, (_, m) in zip(fields, problems, strict=True)],
            )
        name = (row.get("agent_ref") or {}).get("name") or self.args.default_agent
        if name not in self.args.agents:
            return _error(404, f"unknown agent `{name}`; deployed: {', '.join(self.args.agents)}")
        return name

    async def _run(self, agent: str, row: dict[str, Any], staleness: Staleness | None = None) -> dict[str, Any]:
        """One rollout within the deadline, retried on retryable failures; a failure comes back as a failure row."""
        batcher = self._batchers.get(agent)
        if batcher is None:
            batcher = self._batchers[agent] = agent_batcher(agent)
        started = time.perf_counter()
        attempt = (lambda: batcher(row)) if staleness is None else (lambda: staleness.checked(agent, batcher(row)))
        outcome = await run_attempts(attempt, row, self._retry, self._rng)
        self.metrics.finished(outcome.kind or "ok", time.perf_counter() - started)
        return outcome.row

    def _admit(self, rollouts: int) -> JSONResponse | None:
        if self.in_flight + rollouts > self.args.max_in_flight:
            self.metrics.rejected("saturated")
            return _error(429, f"saturated: {self.in_flight} rollouts in flight, limit {self.args.max_in_flight}")
        self.in_flight += rollouts
        return None

    # ---- endpoints -----------------------------------------------------------------------------------------

    @app.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus_metrics(self, request: Request) -> Response:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/run")
    async def run(self, request: Request) -> Response:
        row = await self._guard(request)
        if isinstance(row, JSONResponse):
            return row
        agent = self._agent_of(row)
        if isinstance(agent, JSONResponse):
            return agent
        assert isinstance(row, dict)  # `_agent_of` answered anything else with a 400
        if (refused := self._admit(1)) is not None:
            return refused
        try:
            result = await self._run(agent, row)
        except asyncio.CancelledError:  # the client went away
            self.metrics.finished("cancelled")
            raise
        finally:
            self.in_flight -= 1
        return JSONResponse(result, status_code=500 if "_ng_failure_class" in result else 200)

    @app.post("/v1/rollouts")
    async def rollouts(self, request: Request) -> Response:
        body = await self._guard(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            job = RolloutsRequest.model_validate(body)
        except ValidationError as e:
            return _invalid(e)
        overrides = {
            k: v
            for k, v in job.model_dump(include={"temperature", "top_p", "max_output_tokens"}).items()
            if v is not None
        }
        rows = [  # what runs is what is checked
            {**row, "responses_create_params": {**row["responses_create_params"], **overrides}}
            if overrides and isinstance(row.get("responses_create_params"), dict)
            else row
            for row in job.rows
        ]
        agents = [self._agent_of(row, f"rows.{index}.") for index, row in enumerate(rows)]
        if refused := next((a for a in agents if isinstance(a, JSONResponse)), None):
            return refused
        try:
            with TaskIndex() as tasks:  # NeMo Gym's numbering, as a collection's: identical rows are one task
                numbered = [tasks.claim_row(row, job.num_repeats) for row in rows]
        except (TypeError, ValueError):
            return _error(400, "a row's `_ng_task_index` must be a non-negative integer")
        work: list[tuple[str, dict[str, Any]]] = []
        for row, agent, (task, first) in zip(rows, agents, numbered, strict=True):
            assert isinstance(agent, str)
            params = row["responses_create_params"]
            for k in range(first, first + job.num_repeats):
                work.append(
                    (
                        agent,
                        {
                            **row,
                            "responses_create_params": params,
                            "agent_ref": {"name": agent},
                            "_ng_task_index": task,
                            "_ng_rollout_index": k,
                        },
                    )
                )
        replayed: dict[int, dict[str, Any]] = {}
        key = job.idempotency_key
        if key is not None:
            fingerprint = hashlib.sha256(
                json.dumps(job.model_dump(exclude={"idempotency_key"}), sort_keys=True, default=str).encode()
            ).hexdigest()
            try:
                replayed = self.idempotency.begin(key, fingerprint)
            except IdempotencyConflict as e:
                return _error(409, str(e))
            except IdempotencyMismatch as e:
                return _error(422, str(e))
        staleness = None if job.max_policy_lag is None else Staleness(job.max_policy_lag, flag_stale=job.flag_stale)
        batch = _Batch(self, work, job.group_size, key, replayed, staleness)
        if (refused := self._admit(len(batch.pending))) is not None:
            if key is not None:
                self.idempotency.end(key)
            return refused
        self.metrics.replayed += len(replayed)
        return _BatchResponse(batch, headers={"Idempotency-Replayed": str(len(replayed))} if key else None)

    @app.post("/v1/responses")
    async def responses(self, request: Request) -> Response:
        body = await self._guard(request)
        if isinstance(body, JSONResponse):
            return body
        if self.args.model_app is None:
            return _error(404, "this ingress serves no model (set `model_app`)")
        if not isinstance(body, dict) or "input" not in body:
            return _openai_error(400, "a Responses request needs `input`", "input")
        if body.get("stream"):
            return _openai_error(400, _NO_STREAMING, "stream")
        model = serve.get_deployment_handle("Model", app_name=self.args.model_app)
        try:
            return JSONResponse(await model.responses.remote(body))
        except Exception as e:  # noqa: BLE001 - the model tier's failure, in OpenAI's shape, not a traceback
            return _model_failure(e)

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        body = await self._guard(request)
        if isinstance(body, JSONResponse):
            return body
        if self.args.model_app is None:
            return _error(404, "this ingress serves no model (set `model_app`)")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _openai_error(400, "a Chat Completions request needs `messages`", "messages")
        if body.get("stream"):
            return _openai_error(400, _NO_STREAMING, "stream")
        model = serve.get_deployment_handle("Model", app_name=self.args.model_app)
        try:
            response = await model.responses.remote(chat_request_to_responses(body))
        except Exception as e:  # noqa: BLE001 - as for /v1/responses
            return _model_failure(e)
        completion = responses_response_to_chat(response)
        last = response["output"][-1] if response.get("output") else {}
        completion["choices"][0]["message"].update(
            {k: last[k] for k in ("prompt_token_ids", "generation_token_ids", "generation_log_probs") if k in last}
        )
        return JSONResponse(completion)

    @app.post("/v1/weights")
    async def push_weights(self, request: Request) -> Response:
        """New weights into every replica of the Model tier; answers once every replica serves them."""
        if self._token is None:  # weights decide what every rollout samples: never open, whatever the rest is
            return _error(403, f"weight updates need a bearer token: set {self.args.token_env} for the ingress")
        body = await self._guard(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            update = WeightsRequest.model_validate(body)
        except ValidationError as e:
            return _invalid(e)
        if (weights := self._policy()) is None:
            return _error(404, "this ingress serves no model (set `model_app`)")
        try:
            report = await weights.push(update.version, checkpoint=update.checkpoint)
        except WeightsError as e:
            status = 422 if isinstance(e, InvalidWeights) else 409 if isinstance(e, VersionNotNewer) else 503
            return JSONResponse({"error": str(e)}, status_code=status)
        return JSONResponse(report.model_dump())

    @app.get("/v1/weights")
    async def weight_versions(self, request: Request) -> Response:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        if (weights := self._policy()) is None:
            return _error(404, "this ingress serves no model (set `model_app`)")
        return JSONResponse((await weights.versions()).model_dump())

    def _policy(self) -> PolicyWeights | None:
        if self._weights is None and self.args.model_app is not None:
            self._weights = PolicyWeights(self.args.model_app)
        return self._weights

    @app.get("/v1/environments")
    async def environments(self, request: Request) -> Response:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        status = serve.status()
        apps = {}
        for name, application in status.applications.items():
            apps[name] = {
                "status": application.status.value,
                "deployments": {
                    d: {"status": dep.status.value, "replicas": dict(dep.replica_states)}
                    for d, dep in application.deployments.items()
                },
            }
        return JSONResponse(
            {
                "agents": self.args.agents,
                "default_agent": self.args.default_agent,
                "model_app": self.args.model_app,
                "in_flight": self.in_flight,
                "applications": apps,
            }
        )


def build_ingress(args: dict[str, Any]) -> Any:
    """The application builder `serve run` imports (`gym_serve.deployments.ingress:build_ingress`).

    It runs where the deployment is built: in `gym-serve up`'s process, or in a
    Serve task on the cluster for `serve run`/`serve deploy`. A token in that
    process's environment is published to the cluster for the replicas, and
    the ingress is then told to require it, so auth cannot silently be off.
    """
    parsed = IngressArgs.model_validate(args)
    if secrets.share(parsed.token_env):
        parsed = parsed.model_copy(update={"require_token": True})
    else:
        secrets.withdraw(parsed.token_env)  # a token published by an earlier deployment is not this one's
    deployment: Any = Ingress  # `@serve.deployment` made the class a `Deployment`, which type checkers do not see
    return deployment.bind(parsed)
