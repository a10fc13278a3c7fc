"""The Ray + Serve fixtures every test module here may use (`serve_instance`), and one name per test file.

pytest imports a test file by its path, so `envs/math/test_math.py` would be the module
`envs.math.test_math` and its package `envs.math` a second copy of `gym_serve.envs.math` (with a second
class of its environment). Those folders install under `gym_serve` (setup.py's package-dir mapping): the
finder below makes the path's name the installed module, so every file is one module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

pytest_plugins = ["gym_serve.testing.fixtures"]

COLLECTED_FOLDERS = ("envs",)
"""Folders of installed packages that hold test files (`testpaths`)."""

collect_ignore_glob = ["envs/*/repo"]
"""A repository an environment ships (swe_fix's `textkit`) has a test suite of its own: the environment runs it in
its sandboxes (its own tests check the pristine repository passes it), never in this process."""


class _InstalledName(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`envs.X` → the module `gym_serve.envs.X`, imported once under its installed name."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if fullname.split(".")[0] not in COLLECTED_FOLDERS:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(f"gym_serve.{spec.name}")
        spec.loader_state = module.__spec__  # importlib sets the module's `__spec__` to this one next
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state  # type: ignore[union-attr]  # executed once, as gym_serve.*


sys.meta_path.insert(0, _InstalledName())
