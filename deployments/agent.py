"""The Agent tier: runs whole episodes, calling the Model and Environment tiers through handles.

An episode is gym-serve's own tool loop (`gym_serve.rollout.loop`), or one of
NeMo Gym's agents hosted unchanged in the replica (`nemo_gym:` in the agent's
args; `gym_serve.environment.nemo_gym.agents`), whose calls to its model and
resources server go to the same tiers through the same handles.

A row a dispatcher sends (`gym_serve.collect.dispatch`) carries its instructions for the attempt in `_gs_run`:
the checkpoint to resume from, whether to report each completed turn (streamed back ahead of the rollout,
`gym_serve.calls.batching.Progress`), and the keys that stop it. `stop_rollouts(keys)` (broadcast to every
replica) stops the rollouts holding any of those keys at their next turn boundary, answered with the turn
they stopped after (`_gs_paused`); with `abort`, at once. A hosted NeMo Gym agent runs its episode whole: it
reports no turns and stops at no boundary (its rollouts are retried from the start, as before).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

from gym_serve.calls import tracing
from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import stream_batch
from gym_serve.calls.handles import EnvironmentHandle, ModelHandle, model_handle
from gym_serve.calls.sandboxes import current_holder
from gym_serve.environment.nemo_gym.routes import Routes
from gym_serve.environment.runner import EnvInfo
from gym_serve.rollout.checkpoint import PAUSED, RUN, Checkpoint, Paused
from gym_serve.rollout.loop import AgentConfig, OnTurn, run_episode
from gym_serve.serving.config import NemoGymAgentArgs
from gym_serve.wire.responses import row_problems

if TYPE_CHECKING:
    from gym_serve.environment.nemo_gym.agents import NemoGymAgent

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}

STOPS_KEPT_S = 3600.0
"""How long a replica remembers a stop key: a rollout holding it that arrives later stops before it starts."""


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
        self.env = EnvironmentHandle(environment, holder=current_holder())
        self.config = config
        self._env_info: EnvInfo | None = None
        self.hosted = hosted_agent(nemo_gym_agent, self.model, self.env, server) if nemo_gym_agent else None
        self._stops: dict[str, float] = {}
        self._running: dict[str, set[asyncio.Future[dict[str, Any]]]] = {}
        self.load = Load()

    @counted
    async def run(self, row: dict[str, Any], report: OnTurn | None = None) -> dict[str, Any]:
        """One episode: the rollout row of `row` (or, stopped at a turn boundary, `{"_gs_paused": turn}`)."""
        if self.hosted is not None:
            return await self.hosted.run({k: v for k, v in row.items() if k != RUN})
        if self._env_info is None:
            self._env_info = await self.env.describe.remote()
        control = row.get(RUN)
        if control is None:
            return await run_episode(row, model=self.model, env=self.env, env_info=self._env_info, config=self.config)
        row = {k: v for k, v in row.items() if k != RUN}
        keys: list[str] = list(control.get("stop") or [])
        resume = Checkpoint.from_wire(control["resume"]) if control.get("resume") else None
        stop = self._stopper(keys) if keys and self._env_info.replay_safe_tools else None
        episode = asyncio.ensure_future(
            run_episode(
                row,
                model=self.model,
                env=self.env,
                env_info=self._env_info,
                config=self.config,
                resume=resume,
                on_turn=report if control.get("report") else None,
                stop=stop,
            )
        )
        for key in keys:
            self._running.setdefault(key, set()).add(episode)
        try:
            return await episode
        except Paused as paused:
            return {PAUSED: paused.turn}
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if episode.cancelled() and current is not None and not current.cancelling():
                return {PAUSED: None}  # aborted by `stop_rollouts`: the caller resolved the rollout already
            raise
        finally:
            for key in keys:
                running = self._running.get(key)
                if running is not None:
                    running.discard(episode)
                    if not running:
                        del self._running[key]

    async def run_batch(
        self, rows: list[dict[str, Any]], traces: list[tracing.Carrier | None] | None = None
    ) -> AsyncIterator[list[tuple[int, Any]]]:
        """Run many rollouts from one request, streaming `(index, rollout or exception)` pairs as they finish.

        The driver sends rows this way (one Serve request per batch, not per rollout); an
        exception comes back as a value, so one failed rollout does not fail its batch. The records
        of completed turns a rollout reports go out ahead of it (`Progress` values).
        `traces`: the driver's trace context of each traced row (`gym_serve.calls.tracing`).
        """
        async for item in stream_batch(self.run, [(row,) for row in rows], traces, reports=True):
            yield item

    def stop_rollouts(self, keys: list[str], abort: bool = False) -> int:
        """Stop the rollouts holding any of `keys` at their next turn boundary (with `abort`, now); returns how
        many were running here. Rollouts that arrive with such a key later stop before they start."""
        now = time.monotonic()
        self._stops = {k: t for k, t in self._stops.items() if now - t < STOPS_KEPT_S}
        self._stops.update(dict.fromkeys(keys, now))
        hit = {episode for key in keys for episode in self._running.get(key, ())}
        if abort:
            for episode in hit:
                episode.cancel()
        return len(hit)

    def _stopper(self, keys: list[str]) -> Callable[[], bool]:
        return lambda: any(key in self._stops for key in keys)

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
