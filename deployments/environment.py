"""The Environment tier: one environment's tools, seeding and verification behind a handle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve

from gym_serve.batching import stream_batch
from gym_serve.config import EnvironmentArgs
from gym_serve.env_runner import EnvRunner
from gym_serve.registry import load_environment_class

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Environment")
class EnvironmentDeployment:
    """Stateless between calls: per-rollout state travels with each call, so any replica serves any rollout."""

    def __init__(self, args: EnvironmentArgs) -> None:
        cls = load_environment_class(args.name)
        self.runner = EnvRunner(cls(args.config))

    async def describe(self) -> dict[str, Any]:
        return self.runner.describe()

    async def seed(self, row: dict[str, Any]) -> Any:
        return await self.runner.seed(row)

    async def call_tools(self, calls: list[dict[str, Any]], state: Any) -> tuple[list[dict[str, Any]], Any]:
        return await self.runner.call_tools(calls, state)

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]:
        return await self.runner.user_turn(row, response, state)

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]:
        return await self.runner.verify(row, response, state)

    async def batch(self, method: str, calls: list[tuple[Any, ...]]) -> AsyncIterator[list[tuple[int, Any]]]:
        """Many calls of one method in one streaming request (see `gym_serve.batching`): a slow call holds up no other."""
        if method not in _BATCHABLE:
            raise ValueError(f"`{method}` cannot be batched; batchable: {', '.join(sorted(_BATCHABLE))}")
        async for item in stream_batch(getattr(self.runner, method), calls):
            yield item


_BATCHABLE = frozenset({"seed", "call_tools", "user_turn", "verify"})
