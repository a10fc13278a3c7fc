"""The NeMo Gym resources servers installed here, found by reading files: no NeMo Gym import.

NeMo Gym ships its servers inside its wheel as the top-level namespace package
`resources_servers` (`resources_servers/<server>/app.py`, `configs/*.yaml`,
`data/example.jsonl`, `data/example_rollouts.jsonl`, `requirements.txt`).
Importing `nemo_gym` changes the importing process (it reorders `sys.path`,
replaces `print`, sets Hugging Face cache variables), so everything that runs
outside an Environment replica — config validation, the CLI, `env test` — uses
this module, which only locates and reads files. `check_server` is the
deploy-time check: an unknown server name (with near matches), NeMo Gym not
installed, an `openai` other than the one NeMo Gym pins, or a module the
server imports that is not installed (named with the package to install).
"""

from __future__ import annotations

import ast
import difflib
import importlib.metadata
import importlib.util
import os
import re
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from gym_serve.errors import EnvError

__all__ = [
    "AGENTS",
    "INSTALL",
    "PREFIX",
    "SERVERS",
    "agent_config_defaults",
    "agent_dir",
    "agent_of",
    "agents_root",
    "available_agents",
    "available_servers",
    "check_server",
    "class_name_of",
    "data_dir",
    "entrypoint",
    "entrypoint_of",
    "hosted_name",
    "is_gymnasium",
    "missing_modules",
    "requirements",
    "model_references",
    "server_class_name",
    "server_config_defaults",
    "server_dir",
    "server_name",
]

PREFIX = "nemo_gym:"
"""Environment names of hosted servers: `nemo_gym:<server>`."""

INSTALL = (
    "pip install -e '.[nemo-gym]' && pip install --no-deps --ignore-requires-python nemo-gym==0.7.0"
    " (NeMo Gym declares Python >= 3.13.14; its code runs on 3.11, and gym-serve's `nemo-gym` extra"
    " holds the dependencies it needs)"
)

SERVERS = "resources_servers"
AGENTS = "responses_api_agents"
_NEMO_GYM_TOP_LEVEL = {"nemo_gym", SERVERS, AGENTS, "responses_api_models"}


def hosted_name(server: str) -> str:
    """The environment name of a hosted server.

    >>> hosted_name("mcqa")
    'nemo_gym:mcqa'
    """
    return PREFIX + server


def server_name(environment: str) -> str | None:
    """The server an environment name hosts, or None for gym-serve's own environments.

    >>> server_name("nemo_gym:mcqa"), server_name("math")
    ('mcqa', None)
    """
    return environment[len(PREFIX) :] if environment.startswith(PREFIX) else None


def servers_root() -> Path:
    """The installed `resources_servers` folder (a namespace package: locating it runs no code)."""
    return _root(SERVERS)


def agents_root() -> Path:
    """The installed `responses_api_agents` folder: NeMo Gym's agents."""
    return _root(AGENTS)


def _root(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise EnvError(f"NeMo Gym is not installed, so no NeMo Gym server can be hosted; install it: {INSTALL}")
    return Path(locations[0])


def available_servers() -> list[str]:
    """The names of the installed servers (folders with a server entrypoint)."""
    return _available(SERVERS)


def available_agents() -> list[str]:
    """The names of NeMo Gym's installed agents."""
    return _available(AGENTS)


def _available(package: str) -> list[str]:
    try:
        root = _root(package)
    except EnvError:
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and (d / _entrypoint_name(d)).is_file())


def server_dir(server: str) -> Path:
    """The folder of an installed server; an unknown name gets the nearest known ones."""
    return _folder(SERVERS, server)


def agent_dir(agent: str) -> Path:
    """The folder of one of NeMo Gym's installed agents; an unknown name gets the nearest known ones."""
    return _folder(AGENTS, agent)


def _folder(package: str, name: str) -> Path:
    root = _root(package)
    path = root / name
    nested = Path(name).parts  # an agent may sit in a nested folder: `conversational_tool_use/simulation`
    if name and ".." not in nested and not Path(name).is_absolute() and (path / _entrypoint_name(path)).is_file():
        return path
    known = _available(package)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(f'`{c}`' for c in close)}?" if close else f"{len(known)} are installed in {root}"
    what = "server" if package == SERVERS else "agent"
    raise EnvError(f"unknown NeMo Gym {what} `{name}`: {hint}")


def data_dir(server: str) -> Path:
    """The server's `data/` folder: `example.jsonl` (tasks) and `example_rollouts.jsonl` (NeMo Gym's recordings)."""
    return server_dir(server) / "data"


def entrypoint(server: str) -> Path:
    """The server's module file (`app.py` unless its config names another)."""
    return entrypoint_of(server_dir(server))


def entrypoint_of(folder: Path) -> Path:
    """The module file of the NeMo Gym server (or agent) in `folder`."""
    return folder / _entrypoint_name(folder)


def module_of(folder: Path) -> str:
    """The importable name of the entrypoint module in `folder`: `resources_servers.<server>.app`, or
    `responses_api_agents.conversational_tool_use.simulation.app` for an agent in a nested folder."""
    package, name = _place(folder)
    return ".".join([package, *name.split("/"), entrypoint_of(folder).stem])


def _place(folder: Path) -> tuple[str, str]:
    """`(package, name)` of a server's or agent's folder: the package folder above it (`resources_servers`,
    `responses_api_agents`) and the folder's path below that, as NeMo Gym's configs name it (`a/b` if nested)."""
    for above in folder.parents:
        if above.name in (SERVERS, AGENTS):
            return above.name, folder.relative_to(above).as_posix()
    return folder.parent.name, folder.name


def server_class_name(server: str) -> str:
    """The server's class: the one its entrypoint runs (`if __name__ == "__main__": X.run_webserver()`)."""
    return class_name_of(entrypoint(server))


def class_name_of(path: Path) -> str:
    """The class a NeMo Gym entrypoint file runs (`X.run_webserver()`)."""
    found = re.findall(r"^\s+(\w+)\.run_webserver\(\)", path.read_text(), flags=re.MULTILINE)
    if len(found) != 1:
        raise EnvError(f"{path}: cannot tell which class is the server (expected one `X.run_webserver()`)")
    return found[0]


def is_gymnasium(server: str) -> bool:
    """Whether the server is Gymnasium-style (`/reset`, `/step`): its class derives from NeMo Gym's
    `GymnasiumServer` (read from its entrypoint, nothing imported)."""
    path = entrypoint(server)
    tree = ast.parse(path.read_text(), filename=str(path))
    name = server_class_name(server)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            return "GymnasiumServer" in bases
    return False


def server_config_defaults(server: str) -> dict[str, Any]:
    """The server's own config block as NeMo Gym ships it (`configs/*.yaml`, `resources_servers: {<server>: ...}`).

    `configs/<server>.yaml` is preferred; otherwise the first file, by name, that configures the server.
    """
    return dict(_config_block(server_dir(server)))


def agent_config_defaults(agent: str) -> dict[str, Any]:
    """The agent's own config block as NeMo Gym ships it (`configs/*.yaml`, `responses_api_agents: {<agent>: ...}`)."""
    return dict(_config_block(agent_dir(agent)))


def agent_of(instance: str) -> str | None:
    """The NeMo Gym agent (its folder) behind an agent instance named in NeMo Gym's shipped configs (a row's
    `agent_ref.name`, e.g. `blackjack_gymnasium_agent` → `gymnasium_agent`), following `_inherit_from`."""
    seen: set[str] = set()
    while instance and instance not in seen:
        seen.add(instance)
        entry = _shipped_instances().get(instance)
        if not isinstance(entry, dict):
            return None
        agents = entry.get(AGENTS)
        if isinstance(agents, dict) and agents:
            return str(next(iter(agents)))
        instance = str(entry.get("_inherit_from") or "")
    return None


def shipped_agent_instances(server: str) -> list[str]:
    """The agent instances NeMo Gym's own configs for `server` (its `configs/*.yaml`) define, e.g.
    `["circle_click_simple_agent"]`: what recorded its rollouts where a recording names no agent."""
    found: set[str] = set()
    for file in sorted((server_dir(server) / "configs").glob("*.yaml")):
        try:
            raw = yaml.safe_load(_with_defaults(file.read_text()))
        except (OSError, yaml.YAMLError):
            continue
        for name, entry in raw.items() if isinstance(raw, dict) else ():
            if isinstance(entry, dict) and isinstance(entry.get(AGENTS), dict) and entry[AGENTS]:
                found.add(str(name))
    return sorted(found)


def agent_instance_config(instance: str) -> dict[str, Any]:
    """What an agent instance of NeMo Gym's shipped configs sets for its agent (a row's `agent_ref.name`, e.g.
    `grl_sokoban_gymnasium_agent` → `{max_steps: 20, ...}`), over what the instances it inherits from set; `{}` for
    an instance the configs do not ship. Its rollouts were recorded with these values, not the agent's defaults."""
    entry = _shipped_instances().get(instance)
    if not isinstance(entry, dict):
        return {}
    inherited = agent_instance_config(str(entry.get("_inherit_from") or "")) if entry.get("_inherit_from") else {}
    agents = entry.get(AGENTS)
    own = next(iter(agents.values()), None) if isinstance(agents, dict) and agents else None
    return {**inherited, **(own if isinstance(own, dict) else {})}


@cache
def _shipped_instances() -> dict[str, Any]:
    """Every top-level instance of NeMo Gym's shipped configs (servers' `configs/`, `benchmarks/`): name → block."""
    root = _root(SERVERS).parent
    instances: dict[str, Any] = {}
    files = sorted(root.glob(f"{SERVERS}/*/configs/*.yaml")) + sorted(root.glob("benchmarks/*/*.yaml"))
    for file in files:
        try:
            raw = yaml.safe_load(_with_defaults(file.read_text()))
        except (OSError, yaml.YAMLError):
            continue
        for name, entry in (raw or {}).items() if isinstance(raw, dict) else ():
            instances.setdefault(str(name), entry)
    return instances


def model_references(config: dict[str, Any]) -> dict[str, str]:
    """The model servers a server's (or agent's) config names: config key path → NeMo Gym server name.

    A reference is a `{type: responses_api_models, name: ...}` block, NeMo Gym's `ModelServerRef`.

    >>> model_references({"judge_model_server": {"type": "responses_api_models", "name": "judge_model"}, "x": 1})
    {'judge_model_server': 'judge_model'}
    """
    found: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            if value.get("type") == "responses_api_models" and isinstance(value.get("name"), str):
                found[path] = value["name"]
                return
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    walk(config, "")
    return found


def check_server(server: str, *, installing: bool = False) -> list[str]:
    """The deploy-time check of a hosted server: raises `EnvError` if it cannot run here; returns warnings.

    Errors: unknown server, NeMo Gym not installed, an `openai` other than NeMo
    Gym's pin (its response types then differ and every verify is rejected),
    a module the server imports at load time that is not installed. Warnings:
    a requirement that is not installed but not imported at load time either
    (some servers import lazily, others list what only their data scripts use),
    an installed package whose version differs from the server's pin.
    `installing`: the server's packages are installed into an environment of
    its own (`gym_serve.environment.nemo_gym.requirements`), so what is missing
    here is not an error.
    """
    path = server_dir(server)
    _check_openai()
    listed = requirements(path)
    missing = [] if installing else missing_modules_in(path)
    if missing:
        raise not_installed(path, missing)
    warnings = []
    for line, requirement in listed:
        pinned = [s.version for s in requirement.specifier if s.operator == "=="]
        installed = _installed_version(requirement.name)
        if installed is None and not installing:
            warnings.append(f"`{server}` requires {line}, which is not installed (not imported when it loads)")
        elif pinned and installed not in pinned:
            warnings.append(f"`{server}` pins {line}; {installed} is installed")
    return warnings


def not_installed(path: Path, modules: list[str]) -> EnvError:
    """The error for a server (in folder `path`) that imports `modules`, which are not installed here: each named
    with the line of the server's `requirements.txt` that provides it, where one does."""
    listed = requirements(path)
    wanted = [_package_for(module, listed) for module in modules]
    return EnvError(
        f"NeMo Gym server `{path.name}` imports what is not installed here: {'; '.join(wanted)}. "
        f"Its requirements: {requirement_files(path)}"
    )


def _entrypoint_name(path: Path) -> str:
    return str(_config_block(path).get("entrypoint") or "app.py")


@cache
def _config_block(path: Path) -> dict[str, Any]:
    """`path`'s block in its shipped configs: `<instance>: {<package>: {<folder>: {...}}}`."""
    package, name = _place(path)
    configs = path / "configs"
    files = sorted(configs.glob("*.yaml")) if configs.is_dir() else []
    preferred = configs / f"{path.name}.yaml"
    for file in ([preferred] if preferred in files else []) + files:
        try:
            raw = yaml.safe_load(_with_defaults(file.read_text()))
        except (OSError, yaml.YAMLError):
            continue
        for entry in (raw or {}).values() if isinstance(raw, dict) else ():
            block = entry.get(package) if isinstance(entry, dict) else None
            if isinstance(block, dict) and isinstance(block.get(name), dict):
                return block[name]
    return {}


_ENV_INTERPOLATION = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")
_SELECT_INTERPOLATION = re.compile(r"\$\{oc\.select:([\w.]+)(?:,([^}]*))?\}")


def _with_defaults(text: str) -> str:
    """A config file's `${oc.env:NAME,default}` and `${oc.select:KEY,default}` values resolved as NeMo Gym's config
    loader resolves them here: the environment variable where it is set, else the default (a YAML scalar), else
    null. `oc.select` picks a key of NeMo Gym's global config, and a hosted server's global config sets no such
    key, so it is its default (after the `oc.env` it may hold).

    >>> _with_defaults("port: ${oc.env:GYM_SERVE_DOCTEST_UNSET,6000}")
    'port: 6000'
    >>> _with_defaults("cache: ${oc.select:use_cache,false}; key: ${oc.select:k,${oc.env:GYM_SERVE_DOCTEST_UNSET}}")
    'cache: false; key: null'
    """
    text = _ENV_INTERPOLATION.sub(lambda m: os.environ.get(m[1]) or (m[2] or "null").strip(), text)
    return _SELECT_INTERPOLATION.sub(lambda m: (m[2] or "null").strip(), text)


def _check_openai() -> None:
    try:
        requires = importlib.metadata.requires("nemo-gym") or []
    except importlib.metadata.PackageNotFoundError as e:
        raise EnvError(f"NeMo Gym is not installed; install it: {INSTALL}") from e
    for line in requires:
        requirement = Requirement(line)
        if requirement.name == "openai" and not requirement.marker:
            installed = _installed_version("openai")
            if installed is None or not requirement.specifier.contains(installed, prereleases=True):
                raise EnvError(
                    f"NeMo Gym needs `{requirement}` (installed: {installed or 'none'}): its request and response "
                    f"types subclass openai's, and under another version every verify call is rejected (422). "
                    f"Install gym-serve's `nemo-gym` extra: {INSTALL}"
                )


def requirements(path: Path) -> list[tuple[str, Requirement]]:
    """`(line, requirement)` of the server's `requirements.txt` and its `pyproject.toml`'s dependencies (some
    servers list theirs there), NeMo Gym itself left out; URLs named by project."""
    file = path / "requirements.txt"
    lines = file.read_text().splitlines() if file.is_file() else []
    out: list[tuple[str, Requirement]] = []
    for raw in lines + _pyproject_dependencies(path / "pyproject.toml"):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-") or line.startswith("nemo-gym"):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:  # a bare URL: git+https://host/org/<project>.git, or a wheel's URL
            segment = line.rstrip("/").rsplit("/", 1)[-1]
            project = segment.split("-", 1)[0] if segment.endswith(".whl") else segment.removesuffix(".git")
            requirement = Requirement(canonicalize_name(project))
        if all(canonicalize_name(requirement.name) != canonicalize_name(r.name) for _, r in out):
            out.append((line, requirement))
    return out


def requirement_files(path: Path) -> str:
    """Where the server in `path` lists its packages, for messages: `requirements.txt` and/or `pyproject.toml`."""
    files = [path / name for name in ("requirements.txt", "pyproject.toml") if (path / name).is_file()]
    return ", ".join(map(str, files or [path / "requirements.txt"]))


def _pyproject_dependencies(file: Path) -> list[str]:
    """`[project].dependencies` of a `pyproject.toml`, each as NeMo Gym's uv installs it: a dependency that
    `[tool.uv.sources]` takes from git is that git URL (`name @ git+URL[@rev]`), whatever the registries hold."""
    if not file.is_file():
        return []
    project = tomllib.loads(file.read_text())
    sources = project.get("tool", {}).get("uv", {}).get("sources", {})
    lines = []
    for dependency in project.get("project", {}).get("dependencies", []):
        try:
            name = canonicalize_name(Requirement(dependency).name)
        except InvalidRequirement:
            lines.append(dependency)
            continue
        source = next((v for k, v in sources.items() if canonicalize_name(k) == name), None)
        if isinstance(source, dict) and source.get("git"):
            rev = source.get("rev") or source.get("tag") or source.get("branch")
            dependency = f"{Requirement(dependency).name} @ git+{source['git']}" + (f"@{rev}" if rev else "")
        lines.append(dependency)
    return lines


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_modules(server: str) -> list[str]:
    """Top-level modules the server's own files import at load time that cannot be found here."""
    return missing_modules_in(server_dir(server))


def missing_modules_in(path: Path) -> list[str]:
    """Top-level modules the server's own files import at load time that cannot be found here."""
    local = {p.stem for p in path.iterdir() if p.suffix == ".py" or (p.is_dir() and not p.name.startswith("."))}
    seen: set[str] = set()
    missing: list[str] = []
    pending = [path / _entrypoint_name(path)]
    scanned: set[Path] = set()
    while pending:
        file = pending.pop()
        if file in scanned or not file.is_file():
            continue
        scanned.add(file)
        for module in _load_time_imports(file):
            if module in local:  # a sibling module, imported by its bare name or as resources_servers.<server>.x
                pending.append(path / f"{module}.py")
                continue
            if module in seen or module in sys.stdlib_module_names or module in _NEMO_GYM_TOP_LEVEL:
                continue
            seen.add(module)
            if importlib.util.find_spec(module) is None:
                missing.append(module)
    return missing


def _load_time_imports(file: Path) -> list[str]:
    """Modules imported by `file`'s module-level statements, outside `try` (optional imports) and `if` blocks."""
    tree = ast.parse(file.read_text(), filename=str(file))
    modules = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            prefix = f"resources_servers.{file.parent.name}."
            modules.append(module[len(prefix) :] if module.startswith(prefix) else module)
    return [m.split(".")[0] for m in modules]


def _package_for(module: str, requirements: list[tuple[str, Requirement]]) -> str:
    """`module` with the requirement that provides it, where the server's requirements name one."""
    for line, requirement in requirements:
        if canonicalize_name(requirement.name) == canonicalize_name(module):
            return f"module `{module}`: install `{line}`"
    listed = ", ".join(line for line, _ in requirements) or "nothing"
    return f"module `{module}` (the server's requirements list: {listed})"
