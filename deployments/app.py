"""The application builder: `serve run` imports `gym_serve.deployments.app:build_app`.

One application = Agent → (Model, Environment), bound with `.bind()`. Each
tier is its own deployment with its own Serve options (see `gym_serve.serving.config`).
Every tier takes its calls in micro-batches, so every tier autoscales on calls
in flight (`gym_serve.calls.autoscaling`).
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

from ray.serve import Application

from gym_serve.calls.autoscaling import BATCHED_TIER_AUTOSCALING, SANDBOX_TIER_AUTOSCALING
from gym_serve.calls.routing import session_router_config
from gym_serve.deployments import agent, environment, replay_model, sandbox
from gym_serve.environment.registry import load_environment_class
from gym_serve.errors import ConfigError
from gym_serve.rollout.harness_config import HarnessConfig
from gym_serve.rollout.loop import AgentConfig
from gym_serve.serving import secrets
from gym_serve.serving.config import (
    AppArgs,
    HarnessAgentArgs,
    HTTPModelArgs,
    ModelRefArgs,
    NemoGymEnvironmentArgs,
    OpenAIModelArgs,
    ReplayModelArgs,
    SandboxArgs,
    VLLMHTTPModelArgs,
    VLLMModelArgs,
    validate_app_args,
)

__all__ = ["build_app"]

HTTPArgs = TypeVar("HTTPArgs", bound=HTTPModelArgs)


def build_app(args: AppArgs | dict[str, Any]) -> Application:
    """Bind the tiers of one application from its `args` (validated here when `serve run` passes a dict)."""
    if not isinstance(args, AppArgs):
        args = validate_app_args(args, source="serve config", app="<this application>")
    model = _model_tier(args)
    if args.environment is None:
        if model is None:
            raise ConfigError(
                f"an application without an environment must define its own model, not `kind: {args.model.kind}`",
                key="args.model",
            )
        return model
    env_options = args.environment.deployment.serve_options(environment.DEFAULTS, BATCHED_TIER_AUTOSCALING)
    model_app = args.model.app if isinstance(args.model, ModelRefArgs) else None
    if isinstance(args.environment, NemoGymEnvironmentArgs):  # a rollout's calls go to its session's replica
        env_options.setdefault("request_router_config", session_router_config())
        _with_server_packages(env_options, args.environment)
    sandboxes = _sandbox_tier(args)
    env = _bind(environment.EnvironmentDeployment, env_options, args.environment, model_app, sandboxes)
    if isinstance(args.agent, HarnessAgentArgs):
        return _harness_agent(args.agent, env, model, model_app, sandboxes)
    config = AgentConfig.model_validate(args.agent.model_dump(exclude={"deployment", "kind", "nemo_gym"}))
    agent_options = args.agent.deployment.serve_options(agent.DEFAULTS, BATCHED_TIER_AUTOSCALING)
    if args.agent.nemo_gym is not None:  # one of NeMo Gym's agents runs the episodes
        server = args.environment.server if isinstance(args.environment, NemoGymEnvironmentArgs) else None
        return _bind(agent.AgentDeployment, agent_options, env, model, config, model_app, args.agent.nemo_gym, server)
    return _bind(agent.AgentDeployment, agent_options, env, model, config, model_app)


def _sandbox_tier(args: AppArgs) -> Application | None:
    """The Sandbox tier: when the args have `sandbox:`, or the environment or the harness agent works in
    sandboxes (with the defaults).

    Every call of a sandbox goes to the replica that holds it (the session router, by the id's replica)."""
    sandbox_args = args.sandbox
    if sandbox_args is None and not isinstance(args.environment, NemoGymEnvironmentArgs) and args.environment:
        if getattr(load_environment_class(args.environment.name), "uses_sandboxes", False):
            sandbox_args = SandboxArgs()
    if sandbox_args is None and isinstance(args.agent, HarnessAgentArgs) and args.agent.isolation == "sandbox":
        sandbox_args = SandboxArgs()
    if sandbox_args is None:
        return None
    options = sandbox_args.deployment.serve_options(sandbox.DEFAULTS, SANDBOX_TIER_AUTOSCALING)
    options.setdefault("request_router_config", session_router_config())
    return _bind(sandbox.SandboxDeployment, options, sandbox_args)


def _harness_agent(
    agent: HarnessAgentArgs,
    env: Application,
    model: Application | None,
    model_app: str | None,
    sandboxes: Application | None,
) -> Application:
    """A harness agent's tiers: its Gateway (sessions, calling the Model tier) and its Agent (running harnesses,
    in the Sandbox tier's sandboxes with `isolation: sandbox`)."""
    from gym_serve.deployments import harness_agent
    from gym_serve.deployments.gateway import deployment as gateway

    gateway_options = agent.gateway_deployment.serve_options(gateway.DEFAULTS, BATCHED_TIER_AUTOSCALING)
    sessions = _bind(gateway.GatewayDeployment, gateway_options, agent.gateway, model, model_app, agent.model_affinity)
    config = HarnessConfig.model_validate(
        agent.model_dump(exclude={"deployment", "gateway_deployment", "tier_call_timeout_s", "model_affinity"})
    )
    tiers = AgentConfig(tier_call_timeout_s=agent.tier_call_timeout_s, model_affinity=agent.model_affinity)
    options = agent.deployment.serve_options(harness_agent.DEFAULTS, BATCHED_TIER_AUTOSCALING)
    sandboxes = sandboxes if config.isolation == "sandbox" else None
    return _bind(harness_agent.HarnessAgentDeployment, options, env, sessions, config, tiers, model_app, sandboxes)


def _model_tier(args: AppArgs) -> Application | None:
    """This application's own Model deployment; None when it shares another application's (`kind: app`)."""
    if isinstance(args.model, ReplayModelArgs):  # synthetic models are replay models too
        options = args.model.deployment.serve_options(replay_model.DEFAULTS, BATCHED_TIER_AUTOSCALING)
        env_name = args.environment.name if args.environment else None
        return _bind(replay_model.ReplayModelDeployment, options, args.model, env_name)
    if isinstance(args.model, OpenAIModelArgs):
        from gym_serve.deployments import openai_model

        options = args.model.deployment.serve_options(openai_model.DEFAULTS, BATCHED_TIER_AUTOSCALING)
        return _bind(openai_model.OpenAIModelDeployment, options, _where_built(args.model))
    if isinstance(args.model, VLLMHTTPModelArgs):
        from gym_serve.deployments import vllm_http_model

        options = args.model.deployment.serve_options(vllm_http_model.DEFAULTS, BATCHED_TIER_AUTOSCALING)
        return _bind(vllm_http_model.VLLMHTTPModelDeployment, options, _where_built(args.model))
    if isinstance(args.model, VLLMModelArgs):
        from gym_serve.deployments import vllm_model  # imports vLLM only where it is used

        defaults = {**vllm_model.DEFAULTS, "max_ongoing_requests": args.model.engine.max_num_seqs}
        options = args.model.deployment.serve_options(defaults, BATCHED_TIER_AUTOSCALING)
        return _bind(vllm_model.VLLMModelDeployment, options, args.model)
    return None


def _with_server_packages(options: dict[str, Any], environment: NemoGymEnvironmentArgs) -> None:
    """A hosted server installed per deployment (`dependencies: pip|uv`): its replicas' `runtime_env`, which Ray
    builds from the server's requirements.txt and caches (merged into one the config sets)."""
    if environment.dependencies == "installed":
        return
    from gym_serve.environment.nemo_gym.requirements import runtime_env

    packages = runtime_env(environment.server, environment.dependencies)
    if packages:
        actor = dict(options.get("ray_actor_options") or {})
        actor["runtime_env"] = {**(actor.get("runtime_env") or {}), **packages}
        options["ray_actor_options"] = actor


def _where_built(model: HTTPArgs) -> HTTPArgs:
    """The endpoint and key as the deploying shell has them: replicas on a cluster see neither its variables.

    `OPENAI_BASE_URL` (not a secret) becomes an `openai` tier's `base_url` when the config leaves it out;
    the key is published for the replicas (`gym_serve.serving.secrets`), never put in the config.
    """
    secrets.share(model.api_key_env)
    if model.base_url is None and os.environ.get("OPENAI_BASE_URL"):
        return model.model_copy(update={"base_url": os.environ["OPENAI_BASE_URL"]})
    return model


def _bind(deployment: Any, options: dict[str, Any], *init_args: Any) -> Application:
    """`deployment.options(**options).bind(*init_args)`.

    `deployment` is typed `Any`: `@serve.deployment` turned the class into a
    `Deployment`, which type checkers do not see.
    """
    return deployment.options(**options).bind(*init_args)
