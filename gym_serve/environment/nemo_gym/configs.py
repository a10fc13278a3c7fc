"""NeMo Gym's own config files (`+config_paths=[...]`), read as NeMo Gym reads them and mapped to a Serve config.

A NeMo Gym user starts servers with `ng_run "+config_paths=[a.yaml,b.yaml]"` and
collects with `ng_collect_rollouts +agent_name=... +input_jsonl_fpath=...`. Their
config files name top-level *instances*, each one server: a resources server
(`resources_servers: {<folder>: {...}}`), an agent (`responses_api_agents`) or a
model server (`responses_api_models`). `read` takes the same command-line
overrides (Hydra's grammar), finds each file as NeMo Gym does
(`NEMO_GYM_EXTRA_ROOTS`, the working directory, then NeMo Gym's install root),
follows nested `config_paths`, merges them in NeMo Gym's order with `env.yaml`
and the command line last, and applies `_inherit_from`, `_copy` and
`_delete_key`; `${...}` interpolations resolve when an instance is mapped.

`serve_config` maps every agent instance to one Serve application named after
it (the name rows carry in `agent_ref.name`): its resources server to the
Environment tier hosting it, `simple_agent` to gym-serve's own loop (any other
agent, or `hosted_agents`, to the Agent tier hosting NeMo Gym's agent), its model
server to the Model tier (`openai_model` to the `openai` kind, `vllm_model` to
`openai` over chat completions or, with token ids, `vllm_http`; `replay_policy`
uses the embedded replay model instead). A judge model a server names becomes a
Model-tier application of its own. API keys never enter the Serve config: each
goes to the deploying process's environment under a variable the config names
(`api_key_env`), which the Model tier's deployment shares as a secret.

Reading needs OmegaConf and Hydra's override parser, which gym-serve's
`nemo-gym` extra installs; nothing here imports NeMo Gym itself.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gym_serve.environment.nemo_gym import catalog
from gym_serve.errors import ConfigError, EnvError

__all__ = [
    "COLLECT_ARGUMENTS",
    "NemoGymConfig",
    "collect_arguments",
    "read",
    "resolve_path",
    "serve_config",
    "write_serve_config",
]

SERVERS, AGENTS, MODELS = catalog.SERVERS, catalog.AGENTS, "responses_api_models"
POLICY = "policy_model"
"""NeMo Gym's name for the policy's model server."""
_CONFIG_PATHS = "config_paths"
_LOOP_AGENT = "simple_agent"
_DESCRIPTIVE = {"entrypoint", "domain", "verified", "description", "value", "license", "host", "port", "datasets"}
"""Fields of a server's or agent's config block that describe it or place it: not its own options."""
_LOOP_FIELDS = _DESCRIPTIVE | {"resources_server", "model_server", "max_steps"}
"""simple_agent's fields gym-serve's own loop honours; any other field set means hosting NeMo Gym's agent."""
MAX_STEPS = 100
"""simple_agent has no step limit unless its config sets one; gym-serve's loop needs one."""


@dataclass
class NemoGymConfig:
    """The merged NeMo Gym config (OmegaConf, interpolations unresolved) and the files it came from."""

    merged: Any
    files: list[Path] = field(default_factory=list)

    @property
    def source(self) -> str:
        """The files, for error messages."""
        return ", ".join(str(f) for f in self.files) or "the command line"

    def instances(self, kind: str) -> dict[str, str]:
        """Instances of one kind (`resources_servers`, ...): name → the folder of the server or agent it runs."""
        from omegaconf import DictConfig

        found = {}
        for name, entry in self.merged.items_ex(resolve=False):
            block = entry.get(kind) if isinstance(entry, DictConfig) else None
            if isinstance(block, DictConfig) and len(block) == 1:
                found[str(name)] = str(next(iter(block.keys())))
        return found

    def resolved(self, name: str, kind: str) -> dict[str, Any]:
        """Instance `name`'s block with its `${...}` resolved; a missing value names the key and how to set it."""
        from omegaconf import OmegaConf
        from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

        folder = next(iter(self.merged[name][kind].keys()))
        try:
            return dict(OmegaConf.to_container(self.merged[name][kind][folder], resolve=True))  # type: ignore[arg-type]
        except (InterpolationResolutionError, MissingMandatoryValue) as e:
            problem = str(e).splitlines()[0]
            raise ConfigError(
                f"{problem}: set it on the command line (`+KEY=VALUE`), in env.yaml or in a config in +config_paths",
                source=self.source,
                key=str(getattr(e, "full_key", None) or name),
            ) from None


def read(overrides: list[str], *, cwd: Path | None = None) -> NemoGymConfig:
    """NeMo Gym's global config from command-line overrides (`+config_paths=[...]`, `+key=value`), as `ng_run`
    builds it: the files of `config_paths` (and those they name), `env.yaml`, then the command line."""
    from omegaconf import OmegaConf

    cwd = cwd or Path.cwd()
    command_line = _parse_overrides(overrides)
    env_yaml = _find("env.yaml", cwd)
    dotenv = _load_yaml(env_yaml) if env_yaml.is_file() else {}
    early = OmegaConf.merge(OmegaConf.create(dotenv), command_line)
    paths = OmegaConf.select(early, _CONFIG_PATHS) or []
    if not OmegaConf.is_list(paths) or not all(isinstance(p, str) for p in paths):
        raise ConfigError(
            f"expected a list of config files, e.g. +config_paths=[a.yaml,b.yaml]; got {paths!r}", key=_CONFIG_PATHS
        )
    files, configs = _included(list(paths), cwd)
    merged = OmegaConf.merge(*configs, OmegaConf.create(dotenv), command_line)
    OmegaConf.set_struct(merged, False)
    _swap_keys(merged, merged, copy.deepcopy(merged))
    return NemoGymConfig(merged=merged, files=files)


def resolve_path(path: str, cwd: Path | None = None) -> Path:
    """A file a NeMo Gym config or argument names, found as NeMo Gym finds it: absolute as is, else under
    `NEMO_GYM_EXTRA_ROOTS`, the working directory, then NeMo Gym's install root (the first that has it)."""
    return _find(path, cwd or Path.cwd())


def _roots(cwd: Path) -> list[Path]:
    extra = [Path(d) for d in os.environ.get("NEMO_GYM_EXTRA_ROOTS", "").split(os.pathsep) if d]
    try:
        install = [catalog.servers_root().parent]
    except EnvError:
        install = []
    return [*extra, cwd, *install]


def _find(path: str, cwd: Path) -> Path:
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate
    roots = _roots(cwd)
    return next((root / candidate for root in roots if (root / candidate).exists()), cwd / candidate)


def _parse_overrides(overrides: list[str]) -> Any:
    """The overrides as one OmegaConf dict, read with Hydra's own grammar (`+a.b=[x,y]`, `++k=v`, `k=null`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    config = OmegaConf.create({})
    for text in overrides:
        try:
            (override,) = OverridesParser.create().parse_overrides([text])
        except HydraException as e:
            raise ConfigError(f"not a NeMo Gym override (`+key=value`): {e}", key=text) from None
        if override.is_delete():
            raise ConfigError("deleting keys (`~key`) is not supported here", key=text)
        OmegaConf.update(config, override.key_or_group, override.value(), merge=True, force_add=True)
    return config


def _load_yaml(path: Path) -> dict[str, Any]:
    """One config file; malformed YAML is named with its file and line."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", source=str(path)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', None) or e}", source=where) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of instances at the top, got {type(raw).__name__}", source=str(path))
    return raw


def _included(paths: list[str], cwd: Path) -> tuple[list[Path], list[Any]]:
    """Every file of `paths` and those their own `config_paths` name, in NeMo Gym's merge order: a file after
    the files it includes (it overrides them), siblings in the order listed (a later one overrides)."""
    from omegaconf import OmegaConf

    listed = list(paths)
    children: list[list[int]] = [[] for _ in listed]
    files, loaded = [], []
    for index, entry in enumerate(listed):  # `listed` grows as files name others
        path = _find(entry, cwd)
        if not path.is_file():
            searched = ", ".join(str(root / entry) for root in _roots(cwd)) if not Path(entry).is_absolute() else entry
            raise ConfigError(f"config file `{entry}` not found; looked in {searched}", key=_CONFIG_PATHS)
        raw = _load_yaml(path)
        for inner in raw.get(_CONFIG_PATHS) or []:
            if inner not in listed:
                listed.append(inner)
                children.append([])
                children[index].append(len(listed) - 1)
        files.append(path)
        loaded.append(OmegaConf.create(raw))
    order: list[int] = []

    def visit(index: int) -> None:
        for child in children[index]:
            visit(child)
        order.append(index)

    for root in range(len(paths)):
        visit(root)
    return [files[i] for i in order], [loaded[i] for i in order]


def _swap_keys(node: Any, root: Any, frozen: Any) -> None:
    """NeMo Gym's `_inherit_from` (the named block, moved here and overridden by this one), `_copy` (copied, not
    moved), their `${inherit_from:path}`/`${copy:path}` string forms, and `_delete_key: a,b`."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    for key, value in list(node.items_ex(resolve=False)):
        deleted: set[str] = set()
        if isinstance(value, DictConfig) and "_delete_key" in value:
            deleted = {k.strip() for k in str(value.pop("_delete_key")).split(",")}
            for k in deleted & set(value.keys()):
                value.pop(k)
        if isinstance(value, DictConfig):
            _swap_keys(value, root, frozen)
        elif isinstance(value, ListConfig):
            for item in value:
                if isinstance(item, DictConfig):
                    _swap_keys(item, root, frozen)
        source, moves = _swap_source(value)
        if source is None:
            continue
        path = source.split(".")
        taken = _index(frozen, path, source)
        if moves:
            parent = _index(root, path[:-1], source)
            parent.pop(path[-1], None)
        if isinstance(value, DictConfig):
            taken = OmegaConf.merge(taken, value)
        node[key] = taken
        for k in deleted & set(node[key].keys() if isinstance(node[key], DictConfig) else ()):
            node[key].pop(k)


def _swap_source(value: Any) -> tuple[str | None, bool]:
    """(the path a value inherits or copies, whether it moves it), or (None, False)."""
    from omegaconf import DictConfig

    if isinstance(value, str):
        for prefix, moves in (("${inherit_from:", True), ("${copy:", False)):
            if value.startswith(prefix):
                return value.removeprefix(prefix).removesuffix("}"), moves
    if isinstance(value, DictConfig):
        for key, moves in (("_inherit_from", True), ("_copy", False)):
            if key in value:
                return str(value.pop(key)), moves
    return None, False


def _index(config: Any, path: list[str], source: str) -> Any:
    for key in path:
        if key not in config:
            raise ConfigError(f"`{source}` names no block of the merged NeMo Gym config", key="_inherit_from")
        config = config[key]
    return config


def serve_config(config: NemoGymConfig, *, replay_policy: bool = False, hosted_agents: bool = False) -> dict[str, Any]:
    """The Serve config (`applications:`) that runs `config`'s agents: see the module docstring.

    Sets, in this process's environment, the variables that carry the model servers' API keys.
    """
    agents = config.instances(AGENTS)
    if not agents:
        servers = ", ".join(config.instances(SERVERS)) or "none"
        raise ConfigError(
            f"no agent instance (`responses_api_agents`) in these NeMo Gym configs (resources servers: {servers}); "
            f"a resources server's own config file names its agent, e.g. "
            f"resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml",
            source=config.source,
        )
    applications: list[dict[str, Any]] = []
    judges: dict[str, str] = {}
    for name in agents:
        applications.append(_application(config, name, replay_policy, hosted_agents, judges))
    for model in sorted(judges):
        applications.append(
            {
                "name": model,
                "route_prefix": None,
                "import_path": "gym_serve.deployments.app:build_app",
                "args": {"model": _model_args(config, model, referrer=judges[model])},
                "deployments": [{"name": "Model", "max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}],
            }
        )
    return {"applications": applications}


def _application(
    config: NemoGymConfig, name: str, replay_policy: bool, hosted_agents: bool, judges: dict[str, str]
) -> dict[str, Any]:
    agent_folder = config.instances(AGENTS)[name]
    try:
        catalog.agent_dir(agent_folder)
    except EnvError as e:
        raise ConfigError(str(e), source=config.source, key=f"{name}.{AGENTS}") from None
    block = config.resolved(name, AGENTS)
    prefix = f"{name}.{AGENTS}.{agent_folder}"
    server_name = _reference(block, "resources_server", prefix, config)
    policy = _reference(block, "model_server", prefix, config, default=POLICY)
    servers = config.instances(SERVERS)
    if server_name not in servers:
        close = difflib.get_close_matches(server_name, list(servers), n=3, cutoff=0.5)
        hint = (
            f"did you mean {', '.join(f'`{c}`' for c in close)}?"
            if close
            else f"defined: {', '.join(servers) or 'none'}"
        )
        raise ConfigError(
            f"agent `{name}` names resources server `{server_name}`, which no config here defines; {hint}",
            source=config.source,
            key=f"{prefix}.resources_server.name",
        )
    server_folder = servers[server_name]
    try:
        catalog.server_dir(server_folder)
    except EnvError as e:
        raise ConfigError(str(e), source=config.source, key=f"{server_name}.{SERVERS}") from None
    server_block = config.resolved(server_name, SERVERS)
    shipped = catalog.server_config_defaults(server_folder)
    environment: dict[str, Any] = {
        "kind": "nemo_gym",
        "server": server_folder,
        "config": _changed(server_block, shipped, _DESCRIPTIVE),
    }
    models: dict[str, str] = {}
    for key, reference in catalog.model_references({**shipped, **server_block}).items():
        if reference == policy and reference != POLICY:
            models[reference] = name  # the server calls the policy by the agent's own name for it
        elif reference != POLICY and reference in config.instances(MODELS):
            models[reference] = reference
            judges.setdefault(reference, f"{server_name}.{SERVERS}.{server_folder}.{key}")
    if models:
        environment["models"] = models
    agent: dict[str, Any]
    loop_fields = set(_changed(block, catalog.agent_config_defaults(agent_folder), set())) - _LOOP_FIELDS
    if agent_folder == _LOOP_AGENT and not hosted_agents and not loop_fields:
        agent = {"max_steps": block.get("max_steps") or MAX_STEPS}
    else:
        hosted = _changed(
            block, catalog.agent_config_defaults(agent_folder), _DESCRIPTIVE | {"resources_server", "model_server"}
        )
        if policy != POLICY:  # the host routes NeMo Gym's policy name to this application's Model tier
            hosted["model_server"] = {"type": MODELS, "name": POLICY}
        agent = {"nemo_gym": {"agent": agent_folder, "config": hosted}}
    model: dict[str, Any] = (
        {"kind": "replay"} if replay_policy else _model_args(config, policy, referrer=f"{prefix}.model_server")
    )
    return {
        "name": name,
        "route_prefix": f"/{name}",
        "import_path": "gym_serve.deployments.app:build_app",
        "args": {"environment": environment, "agent": agent, "model": model},
        "deployments": [
            {"name": "Agent", "max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}},
            {
                "name": "Environment",
                "autoscaling_config": {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 256},
                "max_ongoing_requests": 4096,
                "ray_actor_options": {"num_cpus": 0},
            },
            {"name": "Model", "max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}},
        ],
    }


def _reference(block: dict[str, Any], key: str, prefix: str, config: NemoGymConfig, default: str | None = None) -> str:
    ref = block.get(key)
    name = ref.get("name") if isinstance(ref, dict) else None
    if isinstance(name, str) and name not in ("", "???"):
        return name
    if default is not None:
        return default
    raise ConfigError(f"the agent names no {key.replace('_', ' ')}", source=config.source, key=f"{prefix}.{key}.name")


def _changed(block: dict[str, Any], shipped: dict[str, Any], ignored: Iterable[str]) -> dict[str, Any]:
    """The fields of `block` that differ from what NeMo Gym ships for that server or agent."""
    skip = set(ignored)
    return {k: v for k, v in block.items() if k not in skip and shipped.get(k, _UNSET) != v}


_UNSET = object()


def _model_args(config: NemoGymConfig, name: str, *, referrer: str) -> dict[str, Any]:
    """The Model tier's args for NeMo Gym model server instance `name` (`referrer`: the key that names it)."""
    models = config.instances(MODELS)
    if name not in models:
        raise ConfigError(
            f"model server `{name}` (named by `{referrer}.name`) is defined by no config here: add a model server's "
            f"config to +config_paths (e.g. responses_api_models/openai_model/configs/openai_model.yaml, which "
            f"defines `policy_model`), or pass --replay-model to play NeMo Gym's recordings instead",
            source=config.source,
            key=name,
        )
    folder = models[name]
    block = config.resolved(name, MODELS)
    key_env = f"GYM_SERVE_NEMO_GYM_{name.upper()}_API_KEY"
    if folder == "openai_model":
        _put_key(key_env, block.get("openai_api_key"))
        return {
            "kind": "openai",
            "base_url": block.get("openai_base_url") or None,
            "model": block.get("openai_model"),
            "api": "responses",
            "api_key_env": key_env,
        }
    if folder == "vllm_model":
        _put_key(key_env, block.get("api_key"))
        base_url = block.get("base_url")
        base_url = base_url[0] if isinstance(base_url, list) else base_url
        if block.get("return_token_id_information"):
            return {
                "kind": "vllm_http",
                "base_url": base_url,
                "model": block.get("model"),
                "tokenizer": block.get("model"),
                "api_key_env": key_env,
            }
        return {
            "kind": "openai",
            "base_url": base_url,
            "model": block.get("model"),
            "api": "chat",
            "api_key_env": key_env,
        }
    raise ConfigError(
        f"model server type `{folder}` has no gym-serve mapping (mapped: openai_model, vllm_model); name an "
        f"application in a Serve config instead, or pass --replay-model for the policy",
        source=config.source,
        key=f"{name}.{MODELS}.{folder}",
    )


def _put_key(variable: str, key: Any) -> None:
    """An API key, kept out of the Serve config: in this process's environment, which the deployment shares."""
    if isinstance(key, str) and key:
        os.environ[variable] = key


COLLECT_ARGUMENTS = {
    "input_jsonl_fpath": "input",
    "output_jsonl_fpath": "output",
    "agent_name": "agent",
    "limit": "limit",
    "num_repeats": "num_repeats",
    "num_samples_in_parallel": "concurrency",
    "responses_create_params.temperature": "temperature",
    "responses_create_params.top_p": "top_p",
    "responses_create_params.max_output_tokens": "max_output_tokens",
}
"""`ng_collect_rollouts`' arguments → `gym-serve collect`'s (options as attribute names)."""


def collect_arguments(config: NemoGymConfig) -> dict[str, Any]:
    """The collection arguments `ng_collect_rollouts` would read from these overrides, under gym-serve's names;
    the input file found as NeMo Gym finds it (the working directory, else its install root)."""
    from omegaconf import OmegaConf

    found = {}
    for key, option in COLLECT_ARGUMENTS.items():
        value = OmegaConf.select(config.merged, key, default=None)
        if value is not None:
            found[option] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if "input" in found:
        found["input"] = str(resolve_path(str(found["input"])))
    return found


def write_serve_config(
    config: NemoGymConfig, path: Path, *, replay_policy: bool = False, hosted_agents: bool = False
) -> Path:
    """Map `config` (`serve_config`) and write it at `path`, with a header naming the NeMo Gym files it came
    from, so that the same applications also run with `serve run` or `gym-serve up PATH`."""
    mapped = serve_config(config, replay_policy=replay_policy, hosted_agents=hosted_agents)
    header = "".join(f"#   {f}\n" for f in config.files)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by gym-serve from NeMo Gym's configs:\n" + header + yaml.safe_dump(mapped, sort_keys=False)
    )
    return path
