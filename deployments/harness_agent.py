"""The Agent tier of a harness application: each rollout is a harness run against a gateway session.

It answers what every Agent answers (`run`, `run_batch`, HTTP POST of one row, `policy_app`), so the
dispatcher's front doors (`gym-serve collect`, the in-cluster stream, the ingress's `/v1/rollouts`) and
`serve run` reach it as they reach the tool-loop Agent. Its rollouts run `gym_serve.rollout.harness`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse

from gym_serve.calls import tracing
from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import stream_batch
from gym_serve.calls.gateway import GatewayHandle
from gym_serve.calls.handles import EnvironmentHandle
from gym_serve.calls.sandbox_workspaces import SandboxWorkspaces
from gym_serve.calls.sandboxes import SandboxTierClient
from gym_serve.deployments.agent import answer_row
from gym_serve.environment.runner import EnvInfo
from gym_serve.rollout.checkpoint import RUN
from gym_serve.rollout.confined import ConfinedWorkspaces
from gym_serve.rollout.harness import run_harness_episode
from gym_serve.rollout.harness_config import HarnessConfig
from gym_serve.rollout.loop import AgentConfig, OnTurn
from gym_serve.rollout.workspace import Workspaces

__all__ = ["HarnessAgentDeployment"]

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Agent")
class HarnessAgentDeployment:
    """Runs harness rollouts; see the module docstring."""

    def __init__(
        self,
        environment: DeploymentHandle,
        gateway: DeploymentHandle,
        config: HarnessConfig,
        tiers: AgentConfig,
        model_app: str | None = None,
        sandboxes: DeploymentHandle | None = None,
    ) -> None:
        self.env = EnvironmentHandle(environment)
        self.gateway = GatewayHandle(gateway)
        self.config = config
        self.tiers = tiers
        self._policy_app = model_app or serve.get_replica_context().app_name
        self.workspaces: Workspaces
        if sandboxes is not None:  # `isolation: sandbox`: each rollout's program runs in a sandbox of the tier
            self.workspaces = SandboxWorkspaces(SandboxTierClient(sandboxes), config.sandbox)
        else:
            isolation = "process" if config.callable else config.isolation
            assert isolation != "sandbox", "an `isolation: sandbox` harness is bound with its Sandbox tier"
            self.workspaces = ConfinedWorkspaces(isolation, config.limits)
        self._env_info: EnvInfo | None = None
        self.load = Load()

    @counted
    async def run(self, row: dict[str, Any], report: OnTurn | None = None) -> dict[str, Any]:
        """One harness rollout: the rollout row of `row`.

        A harness runs its own loop, so it runs whole, as a hosted NeMo Gym agent does: it reports no turns and
        stops at no turn boundary; the dispatcher's instructions (`_gs_run`) are dropped and a retried rollout
        starts over."""
        if self._env_info is None:
            self._env_info = await self.env.describe.remote()
        return await run_harness_episode(
            {k: v for k, v in row.items() if k != RUN},
            gateway=self.gateway,
            env=self.env,
            env_info=self._env_info,
            config=self.config,
            workspaces=self.workspaces,
            tiers=self.tiers,
        )

    async def run_batch(
        self, rows: list[dict[str, Any]], traces: list[tracing.Carrier | None] | None = None
    ) -> AsyncIterator[list[tuple[int, Any]]]:
        """Many rollouts from one request, `(index, rollout or exception)` pairs streamed as they finish."""
        async for item in stream_batch(self.run, [(row,) for row in rows], traces):
            yield item

    def stop_rollouts(self, keys: list[str], abort: bool = False) -> int:
        """A harness rollout has no turn boundary to stop at: none is stopped (each ends or times out whole)."""
        return 0

    async def __call__(self, request: Request) -> JSONResponse:
        return await answer_row(request, self.run)

    def policy_app(self) -> str:
        """The application whose Model tier the gateway calls: where its policy's versions are kept."""
        return self._policy_app

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()

    def __del__(self) -> None:
        """Serve's graceful shutdown: a sandbox harness's empty base folder goes with the replica."""
        if isinstance(self.workspaces, SandboxWorkspaces):
            self.workspaces.close()
