"""Finding environments by name.

Three kinds of names:

- `foo`, built in: the package `gym_serve.envs.foo`, which defines exactly one
  `Environment` subclass;
- `foo`, installed: a distribution of its own (with its own dependencies)
  registers it under the entry-point group `gym_serve.environments`, as
  `foo = "my_package:MyEnv"` (`gym-serve env init` writes such a package);
- `my_pkg.my_module:MyEnv`, an import path, for anything importable.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from importlib.metadata import EntryPoint, entry_points

from gym_serve.environment.core import Environment
from gym_serve.environment.nemo_gym.catalog import PREFIX as NEMO_GYM_PREFIX
from gym_serve.errors import EnvError

__all__ = [
    "BUILTIN_PACKAGE",
    "ENTRY_POINT_GROUP",
    "available_environments",
    "installed_environments",
    "load_environment_class",
    "registered_name",
]

ENTRY_POINT_GROUP = "gym_serve.environments"
BUILTIN_PACKAGE = "gym_serve.envs"
"""The built-in environments: one sub-package each (the repository's `envs/`)."""


def available_environments() -> list[str]:
    """The names of every environment: built in (under `envs/`) and installed (by entry point)."""
    return sorted(set(_builtin()) | set(installed_environments()))


def installed_environments() -> dict[str, EntryPoint]:
    """Environments that installed packages register under the entry-point group `gym_serve.environments`."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _builtin() -> list[str]:
    try:
        package = importlib.import_module(BUILTIN_PACKAGE)
    except ImportError:
        return []
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg)


def registered_name(cls: type[Environment]) -> str:
    """The name `cls` is registered under: its built-in package's, or its entry point's.

    A class the registry does not name (one loaded by import path, or a test's) goes by its class name.
    """
    if cls not in _names:
        _names[cls] = _name_of(cls)
    return _names[cls]


_names: dict[type[Environment], str] = {}


def _name_of(cls: type[Environment]) -> str:
    package, _, rest = cls.__module__.partition(f"{BUILTIN_PACKAGE}.")
    if not package and rest.partition(".")[0] in _builtin():
        return rest.partition(".")[0]
    path = f"{cls.__module__}:{cls.__qualname__}"
    for name, entry in installed_environments().items():
        if entry.value == path:
            return name
    return cls.__name__


def load_environment_class(name: str) -> type[Environment]:
    """The `Environment` subclass registered as `name` (or at import path `module:Class`)."""
    if name.startswith(NEMO_GYM_PREFIX):
        raise EnvError(f"`{name}` is a hosted NeMo Gym server, not a gym-serve Environment class")
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise EnvError(f"cannot import environment `{name}`: {e}") from e
        return _checked(cls, f"`{name}`")
    builtin, installed = _builtin(), installed_environments()
    if name in installed:
        entry = installed[name]
        if name in builtin:
            raise EnvError(
                f"two environments are named `{name}`: the built-in `{BUILTIN_PACKAGE}.{name}` and "
                f"`{entry.value}` of the installed package `{_distribution(entry)}`; rename the package's entry point"
            )
        try:
            cls = entry.load()
        except Exception as e:  # the package's own import failed: say which package, keep its error
            raise EnvError(
                f"environment `{name}` (entry point `{entry.value}` of `{_distribution(entry)}`) "
                f"failed to import: {type(e).__name__}: {e}"
            ) from e
        return _checked(cls, f"entry point `{name} = {entry.value}`")
    if name not in builtin:
        known = sorted(set(builtin) | set(installed))
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean `{close[0]}`?" if close else f" Known environments: {', '.join(known) or 'none'}."
        raise EnvError(f"unknown environment `{name}`.{hint}")
    module = importlib.import_module(f"{BUILTIN_PACKAGE}.{name}")
    classes = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Environment) and obj.__module__.startswith(module.__name__)
    ]
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise EnvError(
            f"package `{BUILTIN_PACKAGE}.{name}` must export exactly one Environment subclass, found: {found}"
        )
    return classes[0]


def _checked(cls: object, what: str) -> type[Environment]:
    if not (inspect.isclass(cls) and issubclass(cls, Environment)):
        raise EnvError(f"{what} is not an Environment subclass")
    return cls


def _distribution(entry: EntryPoint) -> str:
    dist = entry.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
