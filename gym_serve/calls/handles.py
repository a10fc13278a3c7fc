"""Each tier's client over its Serve handle, every call micro-batched (`gym_serve.calls.batching`).

`agent_batcher` is how rollouts enter the Agent tier (from every front door of `gym_serve.collect.dispatch`);
`ModelHandle` and `EnvironmentHandle` are how an Agent replica calls its Model and Environment tiers, behind
the `ModelClient` and `EnvClient` interfaces the episode loop is written against (`gym_serve.rollout.loop`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from gym_serve.calls import tracing
from gym_serve.calls.batching import MicroBatcher
from gym_serve.calls.replica_count import replica_counts
from gym_serve.calls.routing import pinned_key, session_bucket
from gym_serve.errors import FailureKind, SessionLostError, failure_kind

__all__ = [
    "MODEL",
    "AgentBatchers",
    "EnvironmentHandle",
    "KeyedSender",
    "ModelCall",
    "ModelHandle",
    "agent_batcher",
    "model_handle",
]


MODEL = "Model"
"""The deployment name of every application's Model tier."""


def model_handle(app: str | None) -> DeploymentHandle:
    """The Model tier of application `app`: an agent's own, or another application's it shares (`kind: app`)."""
    return serve.get_deployment_handle(MODEL, app_name=app)


def agent_batcher(agent: str) -> MicroBatcher[dict[str, Any], dict[str, Any]]:
    """Rows to an agent application's `run_batch`, up to 32 per request, split over its running Agent replicas.

    The one way rollouts enter the Agent tier: every front door's dispatcher sends through it (`AgentBatchers`).
    """
    run_batch = serve.get_app_handle(agent).options(stream=True).run_batch
    return MicroBatcher(
        lambda rows, **traces: run_batch.remote(rows, **traces),
        max_size=32,
        parts=functools.partial(replica_counts.of, agent, "Agent"),
    )


class AgentBatchers:
    """`await agents(name, row)`: the rollout of `row` on the agent application `name`, micro-batched per agent;
    `on_turn` hears the record of each turn the rollout completes (what the Agent reports ahead of the row)."""

    def __init__(self) -> None:
        self._batchers: dict[str, MicroBatcher[dict[str, Any], dict[str, Any]]] = {}

    async def __call__(
        self, agent: str, row: dict[str, Any], on_turn: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        batcher = self._batchers.get(agent)
        if batcher is None:
            batcher = self._batchers[agent] = agent_batcher(agent)
        return await batcher(row, on_turn)


def _replicas_of(handle: DeploymentHandle) -> Callable[[], int]:
    """The running replicas of the handle's deployment: a micro-batch is split into that many requests."""
    return functools.partial(replica_counts.of, handle.app_name, handle.deployment_name)


ModelCall = tuple[dict[str, Any], str | None]


class KeyedSender:
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


class ModelHandle:
    """The Model tier through its handle, calls micro-batched: every Model deployment offers `responses_batch`.

    A tier that asks for session affinity (`affinity_buckets`, asked once) gets
    each turn's calls split by session bucket, each part sent with its bucket as
    the Serve session id, so that a rollout's calls all reach one replica
    (`gym_serve.calls.routing`); any other tier gets one part per replica.
    """

    def __init__(self, handle: DeploymentHandle, affinity: bool) -> None:
        self._handle = handle
        self._affinity = affinity
        self._batcher: asyncio.Future[MicroBatcher[ModelCall, dict[str, Any]]] | None = None

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        if self._batcher is None or (self._batcher.done() and self._batcher.exception() is not None):
            self._batcher = asyncio.ensure_future(self._make_batcher())  # asked again if asking failed
        batched = await asyncio.shield(self._batcher)
        with tracing.span("model_call", {"gym_serve.session": session or ""}) as current:
            response = await batched((request, session))
            tracing.result_attributes(current, response)
            return response

    async def _make_batcher(self) -> MicroBatcher[ModelCall, dict[str, Any]]:
        buckets = await self._handle.affinity_buckets.remote() if self._affinity else None
        sender = KeyedSender(self._handle, "responses_batch")

        def bucket_of(call: ModelCall) -> str | None:
            return None if call[1] is None or not buckets else f"bucket-{session_bucket(call[1], buckets)}"

        return MicroBatcher(
            lambda calls, key=None, **traces: sender(key)(calls, **traces),
            parts=_replicas_of(self._handle),
            route=bucket_of,
        )


class EnvironmentHandle:
    """The Environment tier through its handle, every call micro-batched per method.

    A rollout whose state names the replica holding its session (a hosted NeMo
    Gym server) has its calls sent to that replica (`gym_serve.calls.routing`);
    if that replica dies under the call, the rollout's session is lost.
    """

    def __init__(self, handle: DeploymentHandle) -> None:
        self.describe = handle.describe
        sender = KeyedSender(handle, "batch")
        parts = _replicas_of(handle)

        def batcher(method: str, state_at: int | None) -> MicroBatcher[tuple[Any, ...], Any]:
            route = (lambda call: pinned_key(call[state_at])) if state_at is not None else None
            return MicroBatcher(
                lambda calls, key=None, **traces: sender(key)(method, calls, **traces), parts=parts, route=route
            )

        self._seed = batcher("seed", None)
        self._call_tools = batcher("call_tools", 1)
        self._user_turn = batcher("user_turn", 2)
        self._verify = batcher("verify", 2)
        self._snapshot = batcher("snapshot", 0)
        self._restore = batcher("restore", 1)
        self._http = batcher("http", 2)

    async def seed(self, row: dict[str, Any]) -> Any:
        with tracing.span("seed"):
            return await self._seed((row,))

    async def call_tools(self, calls: list[dict[str, Any]], state: Any) -> tuple[list[dict[str, Any]], Any]:
        names = [str(call.get("name")) for call in calls]
        with tracing.span("tool_call", {"gym_serve.tools": names, "gym_serve.tool_calls": len(calls)}):
            return await _on_session(state, self._call_tools((calls, state)))

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]:
        with tracing.span("user_turn"):
            return await _on_session(state, self._user_turn((row, response, state)))

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]:
        with tracing.span("verify") as current:
            verdict = await _on_session(state, self._verify((row, response, state)))
            tracing.result_attributes(current, verdict)
            return verdict

    async def snapshot(self, state: Any) -> str | None:
        return await self._snapshot((state,))

    async def restore(self, snapshot: str, state: Any) -> Any:
        return await self._restore((snapshot, state))

    async def http(self, path: str, body: bytes, cookies: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """A NeMo Gym agent's call to a hosted server; cookies naming the replica of its session pin it there."""
        with tracing.span("environment_http", {"gym_serve.path": path}):
            return await _on_session(cookies, self._http((path, body, cookies)))


async def _on_session(state: Any, call: Awaitable[Any]) -> Any:
    """`await call`; a replica's death under a call of a rollout pinned to it is the loss of the rollout's session."""
    try:
        return await call
    except Exception as e:
        if failure_kind(e) is FailureKind.KILL_SHAPED and pinned_key(state) is not None:
            raise SessionLostError(f"the replica holding the rollout's session died: {type(e).__name__}: {e}") from e
        raise
