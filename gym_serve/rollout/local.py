"""Run episodes in this process, without Ray: for writing and debugging environments.

The same agent loop and environment runner as the deployments, wired
directly instead of through handles::

    rollout = await run_local(row, Weather(), ReplayModel.for_environment(Weather))
"""

from __future__ import annotations

from typing import Any

from gym_serve.environment.core import Environment
from gym_serve.environment.runner import EnvRunner
from gym_serve.rollout.loop import AgentConfig, ModelClient, run_episode

__all__ = ["run_local"]


async def run_local(
    row: dict[str, Any], env: Environment, model: ModelClient, config: AgentConfig | None = None
) -> dict[str, Any]:
    """One rollout of `row`: the rollout row, as the Agent deployment would return it."""
    runner = EnvRunner(env)
    return await run_episode(row, model=model, env=runner, env_info=runner.describe(), config=config or AgentConfig())
