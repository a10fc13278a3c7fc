"""Finding environments by name.

An environment named `foo` is the package `gym_serve.envs.foo`, which defines exactly one
`Environment` subclass. A name containing `:` is an import path instead
(`my_pkg.my_module:MyEnv`), for environments that live outside this repository.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil

from gym_serve.environment.core import Environment
from gym_serve.environment.nemo_gym.catalog import PREFIX as NEMO_GYM_PREFIX
from gym_serve.errors import EnvError

__all__ = ["available_environments", "load_environment_class"]


def available_environments() -> list[str]:
    """The names of the environments under `envs/`."""
    try:
        package = importlib.import_module("gym_serve.envs")
    except ImportError:
        return []
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg)


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
        if not (inspect.isclass(cls) and issubclass(cls, Environment)):
            raise EnvError(f"`{name}` is not an Environment subclass")
        return cls
    known = available_environments()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean `{close[0]}`?" if close else f" Known environments: {', '.join(known) or 'none'}."
        raise EnvError(f"unknown environment `{name}`.{hint}")
    module = importlib.import_module(f"gym_serve.envs.{name}")
    classes = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Environment) and obj.__module__.startswith(module.__name__)
    ]
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise EnvError(f"package `gym_serve.envs.{name}` must export exactly one Environment subclass, found: {found}")
    return classes[0]
