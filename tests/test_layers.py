"""The layers hold at run time too: what an environment author, a data tool or a trainer imports needs no Ray.

import-linter checks the static import graph (`scripts/check`); this imports
every module of the Ray-free layers in a process where `import ray` fails.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import gym_serve
from gym_serve import environment, rollout, wire

RAY_FREE = sorted(
    [
        f"{package.__name__}.{info.name}"
        for package in (environment, rollout, wire)
        for info in pkgutil.iter_modules(package.__path__)
    ]
    + ["gym_serve", "gym_serve.errors", "gym_serve.client"]
)


def test_the_environment_contract_the_formats_and_the_loop_import_without_ray() -> None:
    assert "gym_serve.environment.core" in RAY_FREE and "gym_serve.rollout.loop" in RAY_FREE
    code = (
        "import sys; sys.modules['ray'] = None\n"  # `import ray` now raises ImportError
        f"import importlib\nfor name in {RAY_FREE!r}:\n    importlib.import_module(name)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'ray' and sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_package_exports_every_name_it_exported_before_the_regrouping() -> None:
    before = {
        "AgentConfig",
        "ConfigError",
        "ContiguityReport",
        "EnvError",
        "EnvRunner",
        "Environment",
        "GymServeError",
        "InputError",
        "InputRow",
        "ModelError",
        "ReplayModel",
        "Response",
        "RolloutError",
        "RolloutRow",
        "Task",
        "ToolError",
        "Turn",
        "Verdict",
        "VerifyError",
        "check_contiguity",
        "run_episode",
        "run_local",
        "tool",
    }
    assert before <= set(gym_serve.__all__)
    assert all(getattr(gym_serve, name) is not None for name in gym_serve.__all__)
