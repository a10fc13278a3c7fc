"""The Environment tier: one environment's tools, seeding and verification behind a handle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve

from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvInfo, EnvRunner
from gym_serve.serving.autoscaling import Load
from gym_serve.serving.batching import stream_batch
from gym_serve.serving.config import EnvironmentArgs

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Environment")
class EnvironmentDeployment:
    """Stateless between calls: per-rollout state travels with each call, so any replica serves any rollout."""

    def __init__(self, args: EnvironmentArgs) -> None:
        cls = load_environment_class(args.name)
        self.runner = EnvRunner(cls(args.config, verify_timeout_s=args.verify_timeout_s))
        self.load = Load()
        # seed, call_tools, user_turn, verify: the runner's, counted for autoscaling
        self._methods = {name: self.load.track(getattr(self.runner, name)) for name in _METHODS}
        for name, method in self._methods.items():
            setattr(self, name, method)

    async def describe(self) -> EnvInfo:
        return self.runner.describe()

    async def batch(self, method: str, calls: list[tuple[Any, ...]]) -> AsyncIterator[list[tuple[int, Any]]]:
        """Many calls of one method in one streaming request (`gym_serve.serving.batching`): a slow call holds up no
        other."""
        if method not in self._methods:
            raise ValueError(f"`{method}` cannot be batched; batchable: {', '.join(_METHODS)}")
        async for item in stream_batch(self._methods[method], calls):
            yield item

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()


_METHODS = ("seed", "call_tools", "user_turn", "verify")
