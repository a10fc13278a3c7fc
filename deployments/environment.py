"""The Environment tier: one environment's tools, seeding and verification behind a handle.

The environment is one of gym-serve's (`EnvRunner`: per-rollout state travels
with each call, any replica serves any call) or a hosted NeMo Gym server
(`NemoGymServer`: a rollout's state stays in the replica that seeded it; the
replica stamps its id on the rollout's state, and the Agent routes the
rollout's later calls to it, `gym_serve.calls.routing`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ray import serve

from gym_serve.calls import tracing
from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import stream_batch
from gym_serve.calls.handles import ModelHandle, model_handle
from gym_serve.calls.routing import REPLICA_KEY
from gym_serve.environment import nemo_gym
from gym_serve.environment.nemo_gym.host import SESSION_COOKIE
from gym_serve.environment.nemo_gym.routes import Routes
from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvInfo, EnvRunner
from gym_serve.errors import EnvError
from gym_serve.serving.config import EnvironmentArgs, NemoGymEnvironmentArgs

if TYPE_CHECKING:
    from gym_serve.environment.nemo_gym.host import NemoGymServer

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Environment")
class EnvironmentDeployment:
    """One environment's runner; see the module docstring for where a rollout's state lives."""

    def __init__(self, args: EnvironmentArgs | NemoGymEnvironmentArgs, policy_app: str | None = None) -> None:
        self.runner: EnvRunner | NemoGymServer
        if isinstance(args, NemoGymEnvironmentArgs):
            from gym_serve.environment.nemo_gym.host import hosted_server  # imports NeMo Gym in this replica only

            # NeMo Gym runs each server in its own folder, and server configs name files relative to it;
            # this replica process is the server's process.
            os.chdir(nemo_gym.data_dir(args.server).parent)
            self.runner = hosted_server(
                args.server,
                args.config,
                verify_timeout_s=args.verify_timeout_s,
                session_idle_s=args.session_idle_s,
                endpoints=args.endpoints,
                routes=model_routes(args.models, policy_app or serve.get_replica_context().app_name),
            )
        else:
            self.runner = EnvRunner(
                load_environment_class(args.name)(args.config, verify_timeout_s=args.verify_timeout_s)
            )
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.stamps_sessions = self.runner.describe().replica_sessions
        self.load = Load()

    @counted
    async def seed(self, row: dict[str, Any]) -> Any:
        """A new rollout's state; an environment that keeps sessions in replica memory gets this replica's name
        stamped on it, so the Agent routes the rollout's later calls here (one that lands elsewhere anyway, this
        replica having gone away, finds no session there and fails as `session_lost`)."""
        state = await self.runner.seed(row)
        if not self.stamps_sessions:
            return state
        assert isinstance(state, dict), "a runner with replica sessions returns its session as state"
        return {**state, REPLICA_KEY: self.replica}

    @counted
    async def call_tools(self, calls: list[dict[str, Any]], state: Any) -> tuple[list[dict[str, Any]], Any]:
        return await self.runner.call_tools(calls, state)

    @counted
    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]:
        return await self.runner.user_turn(row, response, state)

    @counted
    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]:
        return await self.runner.verify(row, response, state)

    @counted
    async def snapshot(self, state: Any) -> str | None:
        assert isinstance(self.runner, EnvRunner), "a hosted server takes no snapshots (`describe().snapshots`)"
        return await self.runner.snapshot(state)

    @counted
    async def restore(self, snapshot: str, state: Any) -> Any:
        assert isinstance(self.runner, EnvRunner), "a hosted server takes no snapshots (`describe().snapshots`)"
        return await self.runner.restore(snapshot, state)

    async def describe(self) -> EnvInfo:
        return self.runner.describe()

    @counted
    async def http(self, path: str, body: bytes, cookies: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """A NeMo Gym agent's call to the hosted server over its HTTP protocol (`NemoGymServer.http`); a session
        it starts is stamped with this replica (a cookie), so the agent's later calls of the rollout come here."""
        runner = self.runner
        if not hasattr(runner, "http"):
            raise EnvError(f"environment `{runner.describe().name}` is not a hosted NeMo Gym server: no HTTP protocol")
        status, answer, set_cookies = await runner.http(path, body, cookies)
        if SESSION_COOKIE in set_cookies:
            set_cookies[REPLICA_KEY] = self.replica
        return status, answer, set_cookies

    async def batch(
        self, method: str, calls: list[tuple[Any, ...]], traces: list[tracing.Carrier | None] | None = None
    ) -> AsyncIterator[list[tuple[int, Any]]]:
        """Many calls of one method in one streaming request (`gym_serve.calls.batching`): a slow call holds up no
        other. `traces`: the callers' trace contexts of traced calls (`gym_serve.calls.tracing`)."""
        if method not in _METHODS:
            raise ValueError(f"`{method}` cannot be batched; batchable: {', '.join(_METHODS)}")
        async for item in stream_batch(getattr(self, method), calls, traces):
            yield item

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()


_METHODS = ("seed", "call_tools", "user_turn", "verify", "snapshot", "restore", "http")


def model_routes(models: dict[str, str], policy_app: str) -> Routes:
    """NeMo Gym model server names → the Model tiers that answer them, through handles (`policy_model`: the
    policy's own unless mapped)."""
    apps = {"policy_model": policy_app, **models}
    return Routes(
        models={name: ModelHandle(model_handle(app), affinity=False).responses for name, app in apps.items()}
    )
