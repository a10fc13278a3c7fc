"""The HTTP ingress for external trainers: a FastAPI app served by Ray Serve.

- `POST /run`: one row in, one rollout row out (NeMo Gym's agent `/run` bodies).
- `POST /v1/rollouts`: rows × `num_repeats` (with sampling overrides); rollouts stream back as NDJSON lines as
  they finish, or as whole groups with `group_size`; a rollout that fails comes back as a failure line with
  its `_ng_failure_class`. A client that disconnects cancels its batch's rollouts.
- `POST /v1/responses`, `POST /v1/chat/completions`: the Model tier, OpenAI-compatible (token ids, when the
  model gives them, stay on the items as extra fields).
- `GET /v1/environments`, `GET /healthz`.

Optional bearer-token auth (the token is read from the environment variable
the config names; everything but `/healthz` needs it). Bounded: bodies over
`max_body_bytes` get 413, and when accepting a request would put more than
`max_in_flight` rollouts in flight the answer is 429 with `Retry-After`.
"""

import asyncio
import hmac
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ray import serve

from gym_serve.batching import MicroBatcher
from gym_serve.conversion import chat_request_to_responses, responses_response_to_chat
from gym_serve.failures import RETRYABLE, classify

__all__ = ["IngressArgs", "build_ingress"]

app = FastAPI(title="gym-serve", docs_url=None, redoc_url=None)


class IngressArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: list[str] = Field(description="Agent applications rows may route to (by `agent_ref.name`).")
    default_agent: str | None = None
    model_app: str | None = Field(default=None, description="The application whose Model tier /v1/* serves.")
    token_env: str = Field(default="GYM_SERVE_TOKEN", description="Bearer token variable; unset means no auth.")
    max_in_flight: int = Field(default=4096, ge=1)
    max_body_bytes: int = Field(default=32 << 20, ge=1024)
    max_attempts: int = Field(default=3, ge=1)


class RolloutsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: list[dict[str, Any]] = Field(min_length=1)
    num_repeats: int = Field(default=1, ge=1)
    group_size: int | None = Field(default=None, ge=1, description="Send each task's rollouts together, in groups.")
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    idempotency_key: str | None = None


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status,
                        headers={"Retry-After": "1"} if status == 429 else None)


@serve.deployment(name="Ingress", max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
@serve.ingress(app)
class Ingress:
    def __init__(self, args: IngressArgs | dict[str, Any]) -> None:
        self.args = args if isinstance(args, IngressArgs) else IngressArgs.model_validate(args)
        self._token = os.environ.get(self.args.token_env) or None
        self._batchers: dict[str, MicroBatcher[dict[str, Any], dict[str, Any]]] = {}
        self.in_flight = 0

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

    def _agent_of(self, row: Any) -> str | JSONResponse:
        if not isinstance(row, dict) or not isinstance(row.get("responses_create_params"), dict):
            return _error(400, "a row must be an object with `responses_create_params`")
        name = (row.get("agent_ref") or {}).get("name") or self.args.default_agent
        if name not in self.args.agents:
            return _error(404, f"unknown agent `{name}`; deployed: {', '.join(self.args.agents)}")
        return name

    async def _run(self, agent: str, row: dict[str, Any]) -> dict[str, Any]:
        """One rollout, retried on retryable failures; a failure comes back as a failure row."""
        batcher = self._batchers.get(agent)
        if batcher is None:
            run_batch = serve.get_app_handle(agent).options(stream=True).run_batch
            batcher = self._batchers[agent] = MicroBatcher(lambda rows: run_batch.remote(rows), max_size=32)
        for attempt in range(1, self.args.max_attempts + 1):
            try:
                return await batcher(row)
            except Exception as e:
                failure_class = classify(e)
                if failure_class in RETRYABLE and attempt < self.args.max_attempts:
                    await asyncio.sleep(0.1 * 2**attempt)
                    continue
                return {**row, "_ng_failure_class": failure_class, "error": str(e) or type(e).__name__,
                        "attempts": attempt}
        raise AssertionError("unreachable")

    def _admit(self, rollouts: int) -> JSONResponse | None:
        if self.in_flight + rollouts > self.args.max_in_flight:
            return _error(429, f"saturated: {self.in_flight} rollouts in flight, limit {self.args.max_in_flight}")
        self.in_flight += rollouts
        return None

    # ---- endpoints -----------------------------------------------------------------------------------------

    @app.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/run")
    async def run(self, request: Request) -> Response:
        row = await self._guard(request)
        if isinstance(row, JSONResponse):
            return row
        agent = self._agent_of(row)
        if isinstance(agent, JSONResponse):
            return agent
        if (refused := self._admit(1)) is not None:
            return refused
        try:
            result = await self._run(agent, row)
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
            err = e.errors()[0]
            return _error(400, f"`{'.'.join(map(str, err['loc']))}`: {err['msg']}")
        overrides = {k: v for k, v in job.model_dump(include={"temperature", "top_p", "max_output_tokens"}).items()
                     if v is not None}
        work: list[tuple[str, dict[str, Any]]] = []
        for index, row in enumerate(job.rows):
            agent = self._agent_of(row)
            if isinstance(agent, JSONResponse):
                return agent
            task = row.get("_ng_task_index", index)
            params = {**row["responses_create_params"], **overrides}
            for k in range(job.num_repeats):
                work.append((agent, {**row, "responses_create_params": params, "agent_ref": {"name": agent},
                                     "_ng_task_index": task, "_ng_rollout_index": k}))
        if (refused := self._admit(len(work))) is not None:
            return refused
        return StreamingResponse(self._stream(work, job.group_size), media_type="application/x-ndjson")

    async def _stream(self, work: list[tuple[str, dict[str, Any]]], group_size: int | None) -> AsyncIterator[bytes]:
        tasks = [asyncio.ensure_future(self._run(agent, row)) for agent, row in work]
        groups: dict[Any, list[dict[str, Any]]] = {}
        released = 0
        try:
            for next_done in asyncio.as_completed(tasks):
                result = await next_done
                self.in_flight -= 1
                released += 1
                if group_size is None:
                    yield json.dumps(result).encode() + b"\n"
                    continue
                group = groups.setdefault(result["_ng_task_index"], [])
                group.append(result)
                if len(group) == group_size:
                    del groups[result["_ng_task_index"]]
                    yield b"".join(json.dumps(r).encode() + b"\n" for r in group)
            for group in groups.values():  # groups smaller than group_size (num_repeats not a multiple)
                yield b"".join(json.dumps(r).encode() + b"\n" for r in group)
        finally:  # the client went away (or we are done): stop what is still running
            for task in tasks:
                task.cancel()
            self.in_flight -= len(work) - released

    @app.post("/v1/responses")
    async def responses(self, request: Request) -> Response:
        body = await self._guard(request)
        if isinstance(body, JSONResponse):
            return body
        if self.args.model_app is None:
            return _error(404, "this ingress serves no model (set `model_app`)")
        if not isinstance(body, dict) or "input" not in body:
            return _error(400, "a Responses request needs `input`")
        model = serve.get_deployment_handle("Model", app_name=self.args.model_app)
        return JSONResponse(await model.responses.remote(body))

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        body = await self._guard(request)
        if isinstance(body, JSONResponse):
            return body
        if self.args.model_app is None:
            return _error(404, "this ingress serves no model (set `model_app`)")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "a Chat Completions request needs `messages`")
        model = serve.get_deployment_handle("Model", app_name=self.args.model_app)
        response = await model.responses.remote(chat_request_to_responses(body))
        completion = responses_response_to_chat(response)
        last = response["output"][-1] if response.get("output") else {}
        completion["choices"][0]["message"].update(
            {k: last[k] for k in ("prompt_token_ids", "generation_token_ids", "generation_log_probs") if k in last})
        return JSONResponse(completion)

    @app.get("/v1/environments")
    async def environments(self, request: Request) -> Response:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        status = serve.status()
        apps = {}
        for name, application in status.applications.items():
            apps[name] = {"status": application.status.value,
                          "deployments": {d: {"status": dep.status.value, "replicas": dict(dep.replica_states)}
                                          for d, dep in application.deployments.items()}}
        return JSONResponse({"agents": self.args.agents, "default_agent": self.args.default_agent,
                             "model_app": self.args.model_app, "in_flight": self.in_flight, "applications": apps})


def build_ingress(args: dict[str, Any]) -> Any:
    """The application builder `serve run` imports (`deployments.ingress:build_ingress`)."""
    return Ingress.bind(IngressArgs.model_validate(args))
