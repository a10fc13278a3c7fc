"""The application builder: `serve run` imports `gym_serve.deployments.app:build_app`.

One application = Agent → (Model, Environment), bound with `.bind()`. Each
tier is its own deployment with its own Serve options (see `gym_serve.serving.config`).
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from gym_serve.deployments import agent, environment, replay_model
from gym_serve.rollout.loop import AgentConfig
from gym_serve.serving.autoscaling import BATCHED_TIER_AUTOSCALING
from gym_serve.serving.config import (
    AppArgs,
    ModelRefArgs,
    OpenAIModelArgs,
    ReplayModelArgs,
    VLLMModelArgs,
    validate_app_args,
)

__all__ = ["build_app"]


def build_app(args: AppArgs | dict[str, Any]) -> Application:
    """Bind the tiers of one application from its `args` (validated here when `serve run` passes a dict)."""
    if not isinstance(args, AppArgs):
        args = validate_app_args(args, source="serve config", app="<this application>")
    env_name = args.environment.name if args.environment else None
    model = None
    if isinstance(args.model, ReplayModelArgs):  # synthetic models are replay models too
        options = args.model.deployment.serve_options(replay_model.DEFAULTS, BATCHED_TIER_AUTOSCALING)
        model = replay_model.ReplayModelDeployment.options(**options).bind(args.model, env_name)
    elif isinstance(args.model, OpenAIModelArgs):
        from gym_serve.deployments import openai_model

        options = args.model.deployment.serve_options(openai_model.DEFAULTS)
        model = openai_model.OpenAIModelDeployment.options(**options).bind(args.model)
    elif isinstance(args.model, VLLMModelArgs):
        from gym_serve.deployments import vllm_model  # imports vLLM only where it is used

        defaults = {**vllm_model.DEFAULTS, "max_ongoing_requests": args.model.engine.max_num_seqs}
        model = vllm_model.VLLMModelDeployment.options(**args.model.deployment.serve_options(defaults)).bind(
            args.model
        )
    if args.environment is None:
        if model is None:
            raise ValueError("an application without an environment must define its own model")
        return model
    env = environment.EnvironmentDeployment.options(
        **args.environment.deployment.serve_options(environment.DEFAULTS, BATCHED_TIER_AUTOSCALING)
    ).bind(args.environment)
    model_app = args.model.app if isinstance(args.model, ModelRefArgs) else None
    config = AgentConfig.model_validate(args.agent.model_dump(exclude={"deployment"}))
    agent_options = args.agent.deployment.serve_options(agent.DEFAULTS, BATCHED_TIER_AUTOSCALING)
    return agent.AgentDeployment.options(**agent_options).bind(
        env, model, config, model_app
    )
