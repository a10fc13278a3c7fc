"""The Ray + Serve fixtures every test module here may use (`serve_instance`), one name per test file, and the
suite's end (`pytest_unconfigure`).

pytest imports a test file by its path, so `envs/math/test_math.py` would be the module
`envs.math.test_math` and its package `envs.math` a second copy of `gym_serve.envs.math` (with a second
class of its environment). Those folders install under `gym_serve` (setup.py's package-dir mapping): the
finder below makes the path's name the installed module, so every file is one module.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

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


_EXIT_STATUS = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process here, once every report is written, with pytest's own exit status.

    The suite's process ends holding threads of the libraries its tests load (Ray's GCS-client and gRPC threads,
    which `ray.shutdown` leaves running, Serve's router loop, torch's pools, telemetry threads). One of them jumped
    into freed memory while CPython tore the process down after a full green run (`1180 passed`, then
    `pytest: segfault ... error 15` in the kernel log, exit 139), so CI failed on a run whose every test passed.
    What CPython's exit does before its teardown still runs, in its order: non-daemon threads are joined and
    `concurrent.futures` ends its process pools (`threading._shutdown`; run after the exit functions instead, the
    math verifier's live pool worker hung `multiprocessing`'s exit function), then the exit functions (Ray's
    shutdown, pytest's temporary-folder locks). The interpreter's teardown, which checks nothing, is skipped. A
    crash in what is left prints every thread's stack (faulthandler).
    """
    if _EXIT_STATUS not in config.stash or hasattr(config, "workerinput"):
        return  # an xdist worker reports to its controller as it ends; it exits on its own
    with contextlib.suppress(AttributeError, ValueError, OSError):  # a runner whose stderr is no file
        faulthandler.enable(file=sys.__stderr__, all_threads=True)
    threading._shutdown()  # type: ignore[attr-defined]  # as CPython's exit does first: joins threads, ends pools
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash[_EXIT_STATUS])
