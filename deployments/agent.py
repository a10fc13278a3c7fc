"""The Agent tier: runs whole episodes, calling the Model and Environment tiers through handles."""

from __future__ import annotations

import json
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

from gym_serve.agent import AgentConfig, run_episode

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}


class _HandleModel:
    def __init__(self, handle: DeploymentHandle) -> None:
        self._responses = handle.responses

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        return await self._responses.remote(request, session)


class _HandleEnv:
    def __init__(self, handle: DeploymentHandle) -> None:
        self.describe = handle.describe
        self._seed = handle.seed
        self._call_tools = handle.call_tools
        self._user_turn = handle.user_turn
        self._verify = handle.verify

    async def seed(self, row: dict[str, Any]) -> Any:
        return await self._seed.remote(row)

    async def call_tools(self, calls: list[dict[str, Any]], state: Any) -> tuple[list[dict[str, Any]], Any]:
        return await self._call_tools.remote(calls, state)

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]:
        return await self._user_turn.remote(row, response, state)

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]:
        return await self._verify.remote(row, response, state)


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
        self.model = _HandleModel(model)
        self.env = _HandleEnv(environment)
        self.config = config
        self._env_info: dict[str, Any] | None = None

    async def run(self, row: dict[str, Any]) -> dict[str, Any]:
        if self._env_info is None:
            self._env_info = await self.env.describe.remote()
        return await run_episode(row, model=self.model, env=self.env, env_info=self._env_info, config=self.config)

    async def __call__(self, request: Request) -> JSONResponse:
        try:
            row = await request.json()
        except json.JSONDecodeError as e:
            return JSONResponse({"error": f"body is not valid JSON: {e}"}, status_code=400)
        if not isinstance(row, dict) or "responses_create_params" not in row:
            return JSONResponse({"error": "body must be a row with `responses_create_params`"}, status_code=400)
        return JSONResponse(await self.run(row))
