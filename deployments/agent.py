"""The Agent tier: runs whole episodes, calling the Model and Environment tiers through handles.

An episode is gym-serve's own tool loop (`gym_serve.rollout.loop`), or one of
NeMo Gym's agents hosted unchanged in the replica (`nemo_gym:` in the agent's
args; `gym_serve.environment.nemo_gym.agents`), whose calls to its model and
resources server go to the same tiers through the same handles.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import stream_batch
from gym_serve.calls.handles import EnvironmentHandle, ModelHandle, model_handle
from gym_serve.environment.nemo_gym.routes import Routes
from gym_serve.environment.runner import EnvInfo
from gym_serve.rollout.loop import AgentConfig, run_episode
from gym_serve.serving.config import NemoGymAgentArgs
from gym_serve.wire.responses import row_problems

if TYPE_CHECKING:
    from gym_serve.environment.nemo_gym.agents import NemoGymAgent

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Agent")
class AgentDeployment:
    """The tool-loop agent. `run(row)` returns a rollout row; HTTP POST does the same (NeMo Gym's `/run`)."""

    def __init__(
        self,
        environment: DeploymentHandle,
        model: DeploymentHandle | None,
        config: AgentConfig,
        model_app: str | None = None,
        nemo_gym_agent: NemoGymAgentArgs | None = None,
        server: str | None = None,
    ) -> None:
        if model is None:
            model = model_handle(model_app)
        self.model = ModelHandle(model, config.model_affinity)
        self._policy_app = model.app_name
        self.env = EnvironmentHandle(environment)
        self.config = config
        self._env_info: EnvInfo | None = None
        self.hosted = hosted_agent(nemo_gym_agent, self.model, self.env, server) if nemo_gym_agent else None
        self.load = Load()

    @counted
    async def run(self, row: dict[str, Any]) -> dict[str, Any]:
        """One episode: the rollout row of `row`."""
        if self.hosted is not None:
            return await self.hosted.run(row)
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
        return await answer_row(request, self.run)

    def policy_app(self) -> str:
        """The application whose Model tier this agent calls: where its policy's versions are kept."""
        return self._policy_app

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()


async def answer_row(request: Request, run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> JSONResponse:
    """An Agent's HTTP POST (NeMo Gym's `/run`): the row checked, then `run(row)`'s rollout row."""
    try:
        row = await request.json()
    except json.JSONDecodeError as e:
        return JSONResponse({"error": f"body is not valid JSON: {e}"}, status_code=400)
    problems = row_problems(row)
    if problems:
        message = "; ".join(f"`{field}`: {error}" for field, error in problems)
        return JSONResponse({"error": f"invalid row: {message}", "field": problems[0][0]}, status_code=422)
    return JSONResponse(await run(row))


def hosted_agent(
    args: NemoGymAgentArgs, model: ModelHandle, env: EnvironmentHandle, server: str | None
) -> NemoGymAgent:
    """One of NeMo Gym's agents in this replica, its `ServerClient` calls routed through this replica's handles:
    `policy_model` (and the names `args.models` maps) to Model tiers, the hosted server's name to the Environment
    tier, the agent's own name to itself."""
    from gym_serve.environment.nemo_gym.agents import NemoGymAgent  # imports NeMo Gym in this replica only

    models = {name: ModelHandle(model_handle(app), affinity=False).responses for name, app in args.models.items()}
    routes = Routes(models={"policy_model": model.responses, **models})
    if server is not None:

        async def to_environment(method: str, path: str, body: bytes, cookies: dict[str, str]) -> Any:
            return await env.http(path, body, cookies)

        routes.apps[server] = to_environment
    instance = serve.get_replica_context().app_name
    return NemoGymAgent(args.agent, instance=instance, routes=routes, config=args.config, resources_server=server)
