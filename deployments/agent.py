"""The Agent tier: runs whole episodes, calling the Model and Environment tiers through handles."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

from gym_serve.environment.runner import EnvInfo
from gym_serve.errors import FailureKind, SessionLostError, failure_kind
from gym_serve.rollout.loop import AgentConfig, run_episode
from gym_serve.serving.autoscaling import Load
from gym_serve.serving.batching import MicroBatcher, stream_batch
from gym_serve.serving.replica_count import replica_counts
from gym_serve.serving.routing import pinned_key, session_bucket
from gym_serve.wire.responses import row_problems

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}


def _replicas_of(handle: DeploymentHandle) -> Callable[[], int]:
    """The running replicas of the handle's deployment: a micro-batch is split into that many requests."""
    return functools.partial(replica_counts.of, handle.app_name, handle.deployment_name)


ModelCall = tuple[dict[str, Any], str | None]


class _KeyedSender:
    """`<method>.remote` of a streaming handle carrying routing key `key` (Serve's `session_id`); one handle per
    key, made once and kept, for the micro-batches `MicroBatcher(route=...)` sends under that key."""

    def __init__(self, handle: DeploymentHandle, method: str) -> None:
        self._handle = handle
        self._method = method
        self._senders: dict[str | None, Any] = {}

    def __call__(self, key: str | None) -> Any:
        sender = self._senders.get(key)
        if sender is None:
            options: dict[str, Any] = {"stream": True} if key is None else {"stream": True, "session_id": key}
            sender = self._senders[key] = getattr(self._handle.options(**options), self._method).remote
        return sender


class _HandleModel:
    """The Model tier through its handle, calls micro-batched: every Model deployment offers `responses_batch`.

    A tier that asks for session affinity (`affinity_buckets`, asked once) gets
    each turn's calls split by session bucket, each part sent with its bucket as
    the Serve session id, so that a rollout's calls all reach one replica
    (`gym_serve.serving.routing`); any other tier gets one part per replica.
    """

    def __init__(self, handle: DeploymentHandle, affinity: bool) -> None:
        self._handle = handle
        self._affinity = affinity
        self._batcher: asyncio.Future[MicroBatcher[ModelCall, dict[str, Any]]] | None = None

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        if self._batcher is None or (self._batcher.done() and self._batcher.exception() is not None):
            self._batcher = asyncio.ensure_future(self._make_batcher())  # asked again if asking failed
        batched = await asyncio.shield(self._batcher)
        return await batched((request, session))

    async def _make_batcher(self) -> MicroBatcher[ModelCall, dict[str, Any]]:
        buckets = await self._handle.affinity_buckets.remote() if self._affinity else None
        sender = _KeyedSender(self._handle, "responses_batch")

        def bucket_of(call: ModelCall) -> str | None:
            return None if call[1] is None or not buckets else f"bucket-{session_bucket(call[1], buckets)}"

        return MicroBatcher(
            lambda calls, key=None: sender(key)(calls), parts=_replicas_of(self._handle), route=bucket_of
        )


class _HandleEnv:
    """The Environment tier through its handle, every call micro-batched per method.

    A rollout whose state names the replica holding its session (a hosted NeMo
    Gym server) has its calls sent to that replica (`gym_serve.serving.routing`);
    if that replica dies under the call, the rollout's session is lost.
    """

    def __init__(self, handle: DeploymentHandle) -> None:
        self.describe = handle.describe
        sender = _KeyedSender(handle, "batch")
        parts = _replicas_of(handle)

        def batcher(method: str, state_at: int | None) -> MicroBatcher[tuple[Any, ...], Any]:
            route = (lambda call: pinned_key(call[state_at])) if state_at is not None else None
            return MicroBatcher(lambda calls, key=None: sender(key)(method, calls), parts=parts, route=route)

        self._seed = batcher("seed", None)
        self._call_tools = batcher("call_tools", 1)
        self._user_turn = batcher("user_turn", 2)
        self._verify = batcher("verify", 2)

    async def seed(self, row: dict[str, Any]) -> Any:
        return await self._seed((row,))

    async def call_tools(self, calls: list[dict[str, Any]], state: Any) -> tuple[list[dict[str, Any]], Any]:
        return await _on_session(state, self._call_tools((calls, state)))

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]:
        return await _on_session(state, self._user_turn((row, response, state)))

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]:
        return await _on_session(state, self._verify((row, response, state)))


async def _on_session(state: Any, call: Awaitable[Any]) -> Any:
    """`await call`; a replica's death under a call of a rollout pinned to it is the loss of the rollout's session."""
    try:
        return await call
    except Exception as e:
        if failure_kind(e) is FailureKind.KILL_SHAPED and pinned_key(state) is not None:
            raise SessionLostError(f"the replica holding the rollout's session died: {type(e).__name__}: {e}") from e
        raise


@serve.deployment(name="Agent")
class AgentDeployment:
    """The tool-loop agent. `run(row)` returns a rollout row; HTTP POST does the same (NeMo Gym's `/run`)."""

    def __init__(
        self,
        environment: DeploymentHandle,
        model: DeploymentHandle | None,
        config: AgentConfig,
        model_app: str | None = None,
    ) -> None:
        if model is None:
            model = serve.get_deployment_handle("Model", app_name=model_app)
        self.model = _HandleModel(model, config.model_affinity)
        self._policy_app = model.app_name
        self.env = _HandleEnv(environment)
        self.config = config
        self._env_info: EnvInfo | None = None
        self.load = Load()
        self.run = self.load.track(self._run)

    async def _run(self, row: dict[str, Any]) -> dict[str, Any]:
        """One episode (`run(row)` is this, counted for autoscaling)."""
        if self._env_info is None:
            self._env_info = await self.env.describe.remote()
        return await run_episode(row, model=self.model, env=self.env, env_info=self._env_info, config=self.config)

    async def run_batch(self, rows: list[dict[str, Any]]) -> AsyncIterator[list[tuple[int, Any]]]:
        """Run many rollouts from one request, streaming `(index, rollout or exception)` pairs as they finish.

        The driver sends rows this way (one Serve request per batch, not per rollout); an
        exception comes back as a value, so one failed rollout does not fail its batch.
        """
        async for item in stream_batch(self.run, [(row,) for row in rows]):
            yield item

    async def __call__(self, request: Request) -> JSONResponse:
        try:
            row = await request.json()
        except json.JSONDecodeError as e:
            return JSONResponse({"error": f"body is not valid JSON: {e}"}, status_code=400)
        problems = row_problems(row)
        if problems:
            message = "; ".join(f"`{field}`: {error}" for field, error in problems)
            return JSONResponse({"error": f"invalid row: {message}", "field": problems[0][0]}, status_code=422)
        return JSONResponse(await self.run(row))

    def policy_app(self) -> str:
        """The application whose Model tier this agent calls: where its policy's versions are kept."""
        return self._policy_app

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()
