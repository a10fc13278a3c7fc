"""Application config: the `args` of `gym_serve.deployments.app:build_app`, and Serve YAML files.

The deployment format is Ray Serve's own config file, so the same YAML runs
with `serve run`, `serve deploy` and `gym-serve up`::

    applications:
    - name: example_single_tool_call          # also the agent's name (`agent_ref.name`)
      import_path: gym_serve.deployments.app:build_app
      route_prefix: /example_single_tool_call
      args:
        environment: {name: example_single_tool_call}
        model: {kind: replay}
        agent: {max_steps: 10}
      deployments:                             # Serve's per-deployment overrides
      - name: Environment
        num_replicas: 2

Each tier (`Agent`, `Environment`, `Model`) is a deployment of its own, with
its own replicas, autoscaling, `max_ongoing_requests` and
`max_queued_requests`: set them under the tier's `deployment:` key in `args`,
or in Serve's `gym_serve.deployments:` list (which wins, as under `serve run`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from gym_serve.environment.registry import load_environment_class
from gym_serve.errors import ConfigError, EnvError
from gym_serve.rollout.loop import AgentConfig
from gym_serve.testing.synthetic import Latency

__all__ = [
    "AgentArgs",
    "AppArgs",
    "AppSpec",
    "DeploymentOptions",
    "EnvironmentArgs",
    "ModelArgs",
    "ModelRefArgs",
    "OpenAIModelArgs",
    "ReplayModelArgs",
    "SyntheticModelArgs",
    "TIERS",
    "VLLMEngineOptions",
    "VLLMModelArgs",
    "load_serve_config",
]

BUILDER = "gym_serve.deployments.app:build_app"

TIERS = {"Agent": "agent", "Environment": "environment", "Model": "model"}
"""Deployment name → the key of its args in `AppArgs`."""


class DeploymentOptions(BaseModel):
    """Serve options of one tier; anything Serve's `@serve.deployment` accepts."""

    model_config = ConfigDict(extra="allow")

    num_replicas: int | Literal["auto"] | None = None
    autoscaling_config: dict[str, Any] | None = None
    max_ongoing_requests: int | None = None
    max_queued_requests: int | None = None
    ray_actor_options: dict[str, Any] | None = None

    def serve_options(
        self, defaults: dict[str, Any], autoscaling_defaults: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """These options over `defaults`, with autoscaling replacing a fixed replica count.

        `autoscaling_defaults` fill in what an `autoscaling_config` leaves out (the
        batched tiers' policy, see `gym_serve.serving.autoscaling`).
        """
        options = {**defaults, **self.model_dump(exclude_none=True)}
        if "autoscaling_config" in options:
            options.pop("num_replicas", None)
            options["autoscaling_config"] = {**(autoscaling_defaults or {}), **options["autoscaling_config"]}
        return options

    def capacity(self, default_max_ongoing: int) -> int:
        """Requests the tier can hold at its largest: replicas × `max_ongoing_requests`."""
        replicas = self.num_replicas if isinstance(self.num_replicas, int) else 1
        if self.autoscaling_config:
            replicas = int(self.autoscaling_config.get("max_replicas", replicas))
        return replicas * (self.max_ongoing_requests or default_max_ongoing)


class EnvironmentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="An environment under `envs/`, or an import path `module:Class`.")
    config: dict[str, Any] = Field(default_factory=dict, description="The environment's own options.")
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class AgentArgs(AgentConfig):
    model_config = ConfigDict(extra="forbid")

    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class ReplayModelArgs(BaseModel):
    """The replay model: recorded outputs, no weights, no GPU, no key. The embedded default."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["replay"] = "replay"
    recordings: list[str] | None = Field(
        default=None,
        description="Rollout files, or environment names (meaning their data/example_rollouts.jsonl). "
        "Default: this application's environment.",
    )
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0, description="Fraction of rollouts given a wrong answer.")
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class SyntheticModelArgs(ReplayModelArgs):
    """Replay, plus latency, per-replica capacity and payload size you set: a stand-in for a model, for benchmarks.

    Outputs come from the recordings as with `replay`; each call then waits
    `latency` (inside a replica that serves at most `max_concurrency` calls at
    once, as a vLLM replica's batch would) and its last item carries
    `generation_token_ids` / `generation_log_probs` of `output_tokens` entries
    (and `prompt_token_ids` of `prompt_tokens`), the payload a token-returning
    model ships.
    """

    kind: Literal["synthetic"] = "synthetic"  # type: ignore[assignment]
    latency: Latency = Field(default_factory=Latency)
    max_concurrency: int | None = Field(default=None, ge=1, description="Calls one replica serves at once.")
    output_tokens: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    seed: int = 0


class VLLMEngineOptions(BaseModel):
    """vLLM engine options (`AsyncEngineArgs`); anything not listed goes in `extra`."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="A local model folder (or a hub id, where the hub is reachable).")
    dtype: str = "auto"
    max_model_len: int = 4096
    max_num_seqs: int = 64
    load_format: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    seed: int = 0
    extra: dict[str, Any] = Field(default_factory=dict)


class VLLMModelArgs(BaseModel):
    """vLLM engine replicas: the policy itself, with exact token ids and log-probs for training."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["vllm"] = "vllm"
    engine: VLLMEngineOptions
    make_tiny_model: bool = Field(default=False, description="Create the tiny local test model at `engine.model`.")
    default_max_output_tokens: int = 512
    ignore_eos: bool = Field(default=False, description="Generate to the token limit (benchmarks).")
    cpu_threads: int | None = Field(default=None, description="OpenMP threads on CPU builds (default: Ray's).")
    cpu_kv_cache_gib: int = Field(default=1, ge=1, description="KV cache size on CPU builds (VLLM_CPU_KVCACHE_SPACE).")
    session_buckets: int = Field(
        default=32,
        ge=0,
        description="Session buckets an agent splits its model calls into, so that all calls of a rollout reach "
        "one replica and reuse its prefix cache (gym_serve.serving.affinity); 0 turns affinity off.",
    )
    weight_sync_interval_s: float = Field(
        default=5.0, gt=0, description="How often a replica checks it serves the policy's current weights."
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class OpenAIModelArgs(BaseModel):
    """Any OpenAI-compatible endpoint (the OpenAI API, `vllm serve`, other providers)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["openai"] = "openai"
    base_url: str = "https://api.openai.com/v1"
    model: str
    api: Literal["responses", "chat"] = Field(default="responses", description="Which API the endpoint speaks.")
    api_key: SecretStr | None = Field(default=None, description="Prefer `api_key_env`: keys do not belong in files.")
    api_key_env: str = "OPENAI_API_KEY"
    max_retries: int = Field(default=5, ge=0, description="Retries on 429, 5xx, connection errors and timeouts.")
    timeout_s: float = 120.0
    max_concurrency: int = Field(default=64, ge=1, description="Requests one replica keeps in flight.")
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class ModelRefArgs(BaseModel):
    """Use the `Model` deployment of another application (one model tier shared by many environments)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["app"] = "app"
    app: str


ModelArgs = Annotated[
    ReplayModelArgs | SyntheticModelArgs | VLLMModelArgs | OpenAIModelArgs | ModelRefArgs, Field(discriminator="kind")
]


class AppArgs(BaseModel):
    """The `args` of one application: an environment, its agent, and a model.

    Without an `environment`, the application serves only its model tier, for
    other applications to share (`model: {kind: app, app: NAME}`).
    """

    model_config = ConfigDict(extra="forbid")

    environment: EnvironmentArgs | None = None
    agent: AgentArgs = Field(default_factory=AgentArgs)
    model: ModelArgs = Field(default_factory=ReplayModelArgs)


class AppSpec(BaseModel):
    """One entry of a Serve config's `applications:` list."""

    model_config = ConfigDict(extra="allow")

    name: str
    import_path: str
    route_prefix: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    deployments: list[dict[str, Any]] = Field(default_factory=list)

    def app_args(self, source: str = "<config>") -> AppArgs:
        """`args` with the `gym_serve.deployments:` overrides folded in, validated."""
        args = copy.deepcopy(self.args)
        for override in self.deployments:
            override = dict(override)
            dep_name = override.pop("name", None)
            tier = TIERS.get(dep_name)
            if tier is None:
                raise ConfigError(
                    f"unknown deployment `{dep_name}`; this application has {', '.join(TIERS)}",
                    source=source,
                    key=f"applications[{self.name}].deployments",
                )
            args.setdefault(tier, {}).setdefault("deployment", {}).update(override)
        return validate_app_args(args, source=source, app=self.name)


def validate_app_args(args: dict[str, Any], *, source: str, app: str) -> AppArgs:
    """Validate `args`, turning the first problem into an error that names file and key."""
    try:
        parsed = AppArgs.model_validate(args)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(part) for part in err["loc"])
        raise ConfigError(err["msg"], source=source, key=f"applications[{app}].args.{key}") from e
    if parsed.environment is not None:
        try:
            load_environment_class(parsed.environment.name)
        except EnvError as e:
            raise ConfigError(str(e), source=source, key=f"applications[{app}].args.environment.name") from e
    return parsed


def load_serve_config(path: str | Path) -> list[AppSpec]:
    """Read a Serve config YAML; every application using our builder has its args validated."""
    path = Path(path)
    source = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", source=source) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}, line {mark.line + 1}" if mark else source
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", source=where) from e
    if not isinstance(raw, dict) or not isinstance(raw.get("applications"), list) or not raw["applications"]:
        raise ConfigError("expected a Serve config with a non-empty `applications:` list", source=source)
    specs = []
    for i, entry in enumerate(raw["applications"]):
        try:
            spec = AppSpec.model_validate(entry)
        except ValidationError as e:
            err = e.errors()[0]
            key = f"applications[{i}]." + ".".join(str(part) for part in err["loc"])
            raise ConfigError(err["msg"], source=source, key=key) from e
        if spec.import_path == BUILDER:
            spec.app_args(source)
        specs.append(spec)
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"application names must be unique; repeated: {', '.join(duplicates)}", source=source)
    return specs
