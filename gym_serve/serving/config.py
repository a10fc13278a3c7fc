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
or in Serve's `deployments:` list (which wins, as under `serve run`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    SecretStr,
    Tag,
    ValidationError,
    field_validator,
)

from gym_serve.environment import nemo_gym
from gym_serve.environment.registry import load_environment_class
from gym_serve.errors import ConfigError, EnvError
from gym_serve.models.synthetic import Latency, Lengths
from gym_serve.rollout.harness_config import HarnessConfig
from gym_serve.rollout.loop import AgentConfig
from gym_serve.sandbox import Limits
from gym_serve.wire.pieces import field_path

if TYPE_CHECKING:
    from gym_serve.models.http_endpoint import HTTPEndpoint

__all__ = [
    "AgentArgs",
    "AppArgs",
    "AppSpec",
    "DeploymentOptions",
    "EnvironmentArgs",
    "HarnessAgentArgs",
    "ModelArgs",
    "ModelRefArgs",
    "HTTPModelArgs",
    "NemoGymAgentArgs",
    "NemoGymEnvironmentArgs",
    "OpenAIModelArgs",
    "ReplayModelArgs",
    "SandboxArgs",
    "SyntheticModelArgs",
    "TIERS",
    "VLLMEngineOptions",
    "VLLMHTTPModelArgs",
    "VLLMModelArgs",
    "http_options",
    "load_serve_config",
]

BUILDER = "gym_serve.deployments.app:build_app"

TIERS = {"Agent": "agent", "Environment": "environment", "Model": "model", "Sandbox": "sandbox"}
"""Deployment name → the key of its args in `AppArgs`."""
_OPTIONS = {**{name: (key, "deployment") for name, key in TIERS.items()}, "Gateway": ("agent", "gateway_deployment")}
"""Deployment name → where its Serve options go in `AppArgs` (a harness agent's Gateway: under `agent`)."""


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
        batched tiers' policy, see `gym_serve.calls.autoscaling`).
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

    kind: Literal["gym_serve"] = "gym_serve"
    name: str = Field(description="An environment under `envs/`, or an import path `module:Class`.")
    config: dict[str, Any] = Field(default_factory=dict, description="The environment's own options.")
    verify_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Deadline of one verification (default: the environment's own `verify_timeout_s`); "
        "one that overruns it is a `verifier_timeout` failure, never reward 0.",
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class NemoGymEnvironmentArgs(BaseModel):
    """A NeMo Gym resources server, unchanged, hosted in each Environment replica (`gym_serve.environment.nemo_gym`).

    A rollout's calls are routed to the replica that seeded it, which holds its
    session (`gym_serve.calls.routing`).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["nemo_gym"]
    server: str = Field(description="A server shipped in nemo-gym: the folder `resources_servers/<server>`.")
    config: dict[str, Any] = Field(
        default_factory=dict, description="The server's own config fields, over those its `configs/*.yaml` ships."
    )
    endpoints: dict[str, str] = Field(
        default_factory=dict,
        description="NeMo Gym server names the server calls (an LLM judge's model server) → `http://HOST:PORT`.",
    )
    models: dict[str, str] = Field(
        default_factory=dict,
        description="NeMo Gym model server names the server calls (`judge_model`, `genrm_model`, ...) → the gym-serve "
        "application whose Model tier answers them, through its handle. `policy_model` is this application's own "
        "Model tier unless mapped.",
    )
    dependencies: Literal["installed", "pip", "uv"] = Field(
        default="installed",
        description="`installed`: the server's packages must be installed where gym-serve is (checked at deploy "
        "time). `pip`/`uv`: Ray builds the Environment replicas an environment of their own from the server's "
        "requirements.txt (`runtime_env`), so its packages never enter gym-serve's.",
    )
    verify_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Deadline of one verify (NeMo Gym's judge calls retry a refused connection "
        "forever); past it the rollout fails with `verifier_timeout`.",
    )
    session_idle_s: float = Field(
        default=1800.0, gt=0, description="A session no call touched for this long is ended (an abandoned rollout)."
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)

    @property
    def name(self) -> str:
        """The environment's name: `nemo_gym:<server>`."""
        return nemo_gym.hosted_name(self.server)


def _environment_kind(value: Any) -> str:
    kind = value.get("kind", "gym_serve") if isinstance(value, dict) else getattr(value, "kind", "gym_serve")
    return str(kind)


EnvironmentSpec = Annotated[
    Annotated[EnvironmentArgs, Tag("gym_serve")] | Annotated[NemoGymEnvironmentArgs, Tag("nemo_gym")],
    Discriminator(_environment_kind),
]
"""`environment:` in an application's args: one of gym-serve's environments, or a hosted NeMo Gym server."""


class NemoGymAgentArgs(BaseModel):
    """One of NeMo Gym's agents, unchanged, run by the Agent tier instead of gym-serve's own loop
    (`gym_serve.environment.nemo_gym.agents`): its model calls go to the Model tiers, its resources server calls
    to this application's Environment tier, through handles."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(description="An agent shipped in nemo-gym: the folder `responses_api_agents/<agent>`.")
    config: dict[str, Any] = Field(
        default_factory=dict, description="The agent's own config fields, over those its `configs/*.yaml` ships."
    )
    models: dict[str, str] = Field(
        default_factory=dict,
        description="NeMo Gym model server names the agent calls → the application whose Model tier answers them "
        "(`policy_model`: this application's own unless mapped).",
    )


class AgentArgs(AgentConfig):
    """The tool-loop agent (`gym_serve.rollout.loop`): the default."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["loop"] = "loop"
    nemo_gym: NemoGymAgentArgs | None = Field(
        default=None, description="Host one of NeMo Gym's agents instead of running gym-serve's own tool loop."
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class HarnessAgentArgs(HarnessConfig):
    """An agent that brings its own loop (`gym_serve.rollout.harness`), and the Gateway tier its sessions use."""

    tier_call_timeout_s: float = Field(default=300.0, gt=0, description="Deadline of each Agent call to a tier.")
    model_affinity: bool = Field(default=True, description="A rollout's model calls stick to one model replica.")
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)
    gateway_deployment: DeploymentOptions = Field(
        default_factory=DeploymentOptions, description="Serve options of the Gateway tier (replicas, autoscaling)."
    )


def _agent_kind(value: Any) -> str:
    kind = value.get("kind", "loop") if isinstance(value, dict) else getattr(value, "kind", "loop")
    return str(kind)


AgentSpec = Annotated[
    Annotated[AgentArgs, Tag("loop")] | Annotated[HarnessAgentArgs, Tag("harness")],
    Discriminator(_agent_kind),
]
"""`agent:` in an application's args: gym-serve's tool loop (the default) or a harness agent."""


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
    model ships. With `lengths`, each call's length is drawn instead (heavy-tailed)
    and decoded at `seconds_per_token`, its ids contiguous with the rollout's earlier
    calls; the replica counts the tokens it generated (`stats`).
    """

    kind: Literal["synthetic"] = "synthetic"  # type: ignore[assignment]
    latency: Latency = Field(default_factory=Latency)
    max_concurrency: int | None = Field(default=None, ge=1, description="Calls one replica serves at once.")
    output_tokens: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    lengths: Lengths | None = Field(default=None, description="Tokens per response, drawn per call.")
    seconds_per_token: float = Field(default=0.0, ge=0.0, description="Decoding time per token, with `lengths`.")
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
        "one replica and reuse its prefix cache (gym_serve.calls.routing); 0 turns affinity off.",
    )
    weight_sync_interval_s: float = Field(
        default=5.0, gt=0, description="How often a replica checks it serves the policy's current weights."
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)


class HTTPModelArgs(BaseModel):
    """What every model tier behind HTTP needs: where, the key, and how each replica calls it."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    api_key: SecretStr | None = Field(default=None, description="Prefer `api_key_env`: keys do not belong in files.")
    api_key_env: str = "OPENAI_API_KEY"
    max_retries: int = Field(default=5, ge=0, description="Retries on 429, 5xx, connection errors and timeouts.")
    timeout_s: float = Field(default=120.0, gt=0, description="Deadline of one HTTP request.")
    max_concurrency: int = Field(default=64, ge=1, description="Requests one replica keeps in flight.")
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)

    def endpoint(self) -> HTTPEndpoint:
        """The replica's client for `base_url` (the key from config, else the secret `api_key_env`).

        Without a `base_url`, the OpenAI API, as the openai client defaults.
        """
        from gym_serve.models.http_endpoint import HTTPEndpoint
        from gym_serve.serving import secrets

        key = self.api_key.get_secret_value() if self.api_key else secrets.lookup(self.api_key_env) or ""
        return HTTPEndpoint(
            self.base_url or "https://api.openai.com/v1",
            api_key=key,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            max_concurrency=self.max_concurrency,
        )


class OpenAIModelArgs(HTTPModelArgs):
    """Any OpenAI-compatible endpoint (the OpenAI API, `vllm serve`, other providers)."""

    kind: Literal["openai"] = "openai"
    base_url: str | None = Field(
        default=None,
        description="The endpoint, e.g. http://127.0.0.1:8001/v1 for `vllm serve`. Default: $OPENAI_BASE_URL, as the "
        "openai client reads it in the replica, else the OpenAI API.",
    )
    model: str
    api: Literal["responses", "chat"] = Field(default="responses", description="Which API the endpoint speaks.")


class VLLMHTTPModelArgs(HTTPModelArgs):
    """A vLLM server you run (e.g. a trainer's own engine), token ids in and token ids and log-probs out.

    The tier renders each prompt with `tokenizer`'s chat template, extends the
    previous call's ids, and sends ids to the server's `/v1/completions`.
    """

    kind: Literal["vllm_http"] = "vllm_http"
    base_url: str = Field(description="The server's root URL, e.g. `http://127.0.0.1:8000` (a trailing /v1 is fine).")
    tokenizer: str = Field(description="The served model's tokenizer: a local folder or a hub name.")
    model: str | None = Field(default=None, description="The served model's name; default: the server's first.")
    api_key_env: str = "VLLM_API_KEY"
    default_max_output_tokens: int = Field(default=512, ge=1)

    @field_validator("base_url")
    @classmethod
    def _server_root(cls, url: str) -> str:
        """The tier calls `/tokenize` and `/version` beside `/v1/...`: keep the root."""
        return url.rstrip("/").removesuffix("/v1")


class ModelRefArgs(BaseModel):
    """Use the `Model` deployment of another application (one model tier shared by many environments)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["app"] = "app"
    app: str


ModelArgs = Annotated[
    ReplayModelArgs | SyntheticModelArgs | VLLMModelArgs | OpenAIModelArgs | VLLMHTTPModelArgs | ModelRefArgs,
    Field(discriminator="kind"),
]


class SandboxArgs(BaseModel):
    """The Sandbox tier (`sandbox:` in an application's args): workspaces for rollouts (`gym_serve.sandbox`).

    An environment that works in sandboxes gets this tier with these defaults when its args name none.
    """

    model_config = ConfigDict(extra="forbid")

    warm: int = Field(default=2, ge=0, description="Sandboxes each replica keeps ready per base (a warm create).")
    max_sandboxes: int = Field(default=256, ge=1, description="Live sandboxes one replica may hold.")
    max_fork: int = Field(default=64, ge=1, description="Most copies one `fork` may make.")
    cow: Literal["auto", "overlay", "copy"] = Field(
        default="auto", description="The copy-on-write layer: overlayfs where the kernel allows it, else a copy."
    )
    limits: dict[str, Any] = Field(
        default_factory=dict,
        description="Default limits of a sandbox (`gym_serve.sandbox.Limits`: cpu_s, cpus, memory_mb, "
        "max_processes, disk_mb, max_files, wall_s, output_bytes, ttl_s, max_lifetime_s, network); an environment "
        "that names its own (`WorkspaceEnvironment.limits`) gets those.",
    )
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions)

    @field_validator("limits")
    @classmethod
    def _known_limits(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            Limits(**value)
        except TypeError as e:
            raise ValueError(f"unknown sandbox limit: {e}") from None
        return value

    def sandbox_limits(self) -> Limits:
        return Limits(**self.limits)


class AppArgs(BaseModel):
    """The `args` of one application: an environment, its agent, and a model (and a Sandbox tier).

    Without an `environment`, the application serves only its model tier, for
    other applications to share (`model: {kind: app, app: NAME}`).
    """

    model_config = ConfigDict(extra="forbid")

    environment: EnvironmentSpec | None = None
    agent: AgentSpec = Field(default_factory=AgentArgs)
    model: ModelArgs = Field(default_factory=ReplayModelArgs)
    sandbox: SandboxArgs | None = None


class AppSpec(BaseModel):
    """One entry of a Serve config's `applications:` list."""

    model_config = ConfigDict(extra="allow")

    name: str
    import_path: str
    route_prefix: str | None = Field(
        default="/", description="As in Serve's config: `/` when left out; `null` keeps the application off HTTP."
    )
    args: dict[str, Any] = Field(default_factory=dict)
    deployments: list[dict[str, Any]] = Field(default_factory=list)

    _parsed: AppArgs | None = PrivateAttr(default=None)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> AppSpec:
        """A copy; one with fields changed validates its args anew."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied._parsed = None
        return copied

    def app_args(self, source: str = "<config>") -> AppArgs:
        """`args` with the `deployments:` overrides folded in, validated once (the result is kept)."""
        if self._parsed is None:
            self._parsed = self._validate_args(source)
        return self._parsed

    def _validate_args(self, source: str) -> AppArgs:
        args = copy.deepcopy(self.args)
        for override in self.deployments:
            override = dict(override)
            dep_name = override.pop("name", None)
            if dep_name not in _OPTIONS:
                raise ConfigError(
                    f"unknown deployment `{dep_name}`; this application has {', '.join(_OPTIONS)}",
                    source=source,
                    key=f"applications[{self.name}].deployments",
                )
            tier, options = _OPTIONS[dep_name]
            args.setdefault(tier, {}).setdefault(options, {}).update(override)
        return validate_app_args(args, source=source, app=self.name)


_UNION_TAGS = {"environment": ("gym_serve", "nemo_gym"), "agent": ("loop", "harness")}


def _untagged(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """A location without the tag pydantic puts after a tagged union's field (`agent.loop.max_step` is
    `agent.max_step` in the file the user wrote)."""
    if len(loc) > 1 and loc[1] in _UNION_TAGS.get(str(loc[0]), ()):
        return (loc[0], *loc[2:])
    return loc


def validate_app_args(args: dict[str, Any], *, source: str, app: str) -> AppArgs:
    """Validate `args`, turning the first problem into an error that names file and key."""
    try:
        parsed = AppArgs.model_validate(args)
    except ValidationError as e:
        err = e.errors()[0]
        key = f"applications[{app}].args.{field_path(_untagged(err['loc']))}"
        raise ConfigError(err["msg"], source=source, key=key) from e
    environment = parsed.environment
    try:
        if isinstance(environment, NemoGymEnvironmentArgs):
            _check_nemo_gym(environment, source=source, app=app)
        elif environment is not None:
            load_environment_class(environment.name)
    except EnvError as e:
        field = "server" if isinstance(environment, NemoGymEnvironmentArgs) else "name"
        raise ConfigError(str(e), source=source, key=f"applications[{app}].args.environment.{field}") from e
    if isinstance(parsed.agent, AgentArgs) and parsed.agent.nemo_gym is not None:
        _check_nemo_gym_agent(parsed.agent.nemo_gym, source=source, app=app)
    return parsed


def _check_nemo_gym_agent(agent: NemoGymAgentArgs, *, source: str, app: str) -> None:
    """A hosted NeMo Gym agent: installed (near matches otherwise), and every model server it names mapped."""
    from gym_serve.environment.nemo_gym import catalog

    try:
        defaults = catalog.agent_config_defaults(agent.agent)
    except EnvError as e:
        raise ConfigError(str(e), source=source, key=f"applications[{app}].args.agent.nemo_gym.agent") from e
    mapped = {"policy_model", *agent.models}
    for key, name in nemo_gym.model_references({**defaults, **agent.config}).items():
        if name not in mapped:
            raise ConfigError(
                f"NeMo Gym agent `{agent.agent}` calls model server `{name}` (its config's `{key}.name`), which this "
                f"application does not map: name the application whose Model tier answers it at "
                f"`args.agent.nemo_gym.models.{name}`",
                source=source,
                key=f"applications[{app}].args.agent.nemo_gym.models",
            )


def _check_nemo_gym(environment: NemoGymEnvironmentArgs, *, source: str, app: str) -> None:
    """The deploy-time check of a hosted NeMo Gym server: its packages (installed, or installable into its own
    environment), and every model server its config names mapped to an application."""
    from gym_serve.environment.nemo_gym import requirements

    installing = environment.dependencies != "installed"
    nemo_gym.check_server(environment.server, installing=installing)
    if installing:
        requirements.check_installable(environment.server)
    config = {**nemo_gym.server_config_defaults(environment.server), **environment.config}
    mapped = {"policy_model", *environment.models, *environment.endpoints}
    for key, name in nemo_gym.model_references(config).items():
        if name not in mapped:
            raise ConfigError(
                f"NeMo Gym server `{environment.server}` calls model server `{name}` (its config's `{key}.name`), "
                f"which this application does not map: name the application whose Model tier answers it at "
                f"`args.environment.models.{name}` (or `args.environment.config.{key}.name` another mapped name)",
                source=source,
                key=f"applications[{app}].args.environment.models",
            )


def load_serve_config(path: str | Path) -> list[AppSpec]:
    """Read a Serve config YAML; every application using our builder has its args validated.

    The file is first checked with Serve's own schema, so a config `serve run`
    would refuse (two applications on one route prefix, a bad field) is refused
    here too, before anything starts.
    """
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
    _check_serve_schema(raw, source)
    specs = []
    for i, entry in enumerate(raw["applications"]):
        try:
            spec = AppSpec.model_validate(entry)
        except ValidationError as e:
            err = e.errors()[0]
            key = f"applications[{i}].{field_path(err['loc'])}"
            raise ConfigError(err["msg"], source=source, key=key) from e
        if spec.import_path == BUILDER:
            spec.app_args(source)
        specs.append(spec)
    return specs


def http_options(path: str | Path) -> dict[str, Any]:
    """The file's `http_options` (host, port, ...) as written; `{}` when it has none."""
    raw = yaml.safe_load(Path(path).read_text())
    options = raw.get("http_options") if isinstance(raw, dict) else None
    return dict(options) if isinstance(options, dict) else {}


def _check_serve_schema(raw: dict[str, Any], source: str) -> None:
    """Serve's own validation of the file (`ray.serve.schema.ServeDeploySchema`), as `serve run` does it."""
    from ray.serve.schema import ServeDeploySchema

    try:
        ServeDeploySchema.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        key = field_path(err["loc"]) or None
        message = str(err["msg"]).removeprefix("Value error, ")
        if "route prefix" in message:
            message += " Give each HTTP application its own `route_prefix`, and `route_prefix: null` to the others."
        raise ConfigError(message, source=source, key=key) from e
