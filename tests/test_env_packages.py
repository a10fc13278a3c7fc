"""Environments as packages of their own: `gym-serve env init` writes one that passes `env test` as generated,
the registry finds installed ones by entry point, and `gym-serve list` shows where each comes from.

"Installed" here is what `pip install` leaves for the registry to read: a `*.dist-info` folder with the
package's entry points, on the path of the process. The README's walk-through (test_documented_commands.py)
installs one for real with pip and runs `gym-serve env test` on it through Serve.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym_serve.environment.registry import ENTRY_POINT_GROUP, available_environments, load_environment_class
from gym_serve.errors import EnvError

GYM_SERVE = [sys.executable, "-m", "gym_serve.cli"]


def dist_info(site: Path, dist: str, entry_points: dict[str, str]) -> Path:
    """What `pip install` writes for the registry: the distribution's metadata and its entry points."""
    folder = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (folder / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    return site


@pytest.mark.timeout(240)
def test_env_init_writes_a_package_that_passes_its_own_tests_and_is_listed_once_installed(tmp_path: Path) -> None:
    """`gym-serve env test` of it, pip-installed for real, runs in the README's walk-through
    (test_documented_commands.py::test_a_documented_session_runs[README.md:...env init...])."""
    package = tmp_path / "gym-serve-letter-count"
    made = subprocess.run([*GYM_SERVE, "env", "init", "letter_count"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "pip install -e gym-serve-letter-count" in made.stdout and "gym-serve env test letter_count" in made.stdout
    for part in ("pyproject.toml", "letter_count/__init__.py", "letter_count/examples.py",
                 "letter_count/letter_count.yaml", "letter_count/data/example.jsonl",
                 "letter_count/data/example_rollouts.jsonl", "tests/test_letter_count.py"):  # fmt: skip
        assert (package / part).is_file(), part
    assert (
        f'[project.entry-points."{ENTRY_POINT_GROUP}"]\nletter_count = "letter_count:LetterCount"'
        in (package / "pyproject.toml").read_text()
    )
    recordings = [
        json.loads(line) for line in (package / "letter_count/data/example_rollouts.jsonl").read_text().splitlines()
    ]
    assert sorted(r["reward"] for r in recordings) == [0.0] * 5 + [1.0] * 5, "a right and a wrong answer per row"

    site = dist_info(tmp_path / "site", "gym-serve-letter-count", {"letter_count": "letter_count:LetterCount"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), str(site)])}
    own_tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                               cwd=package, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert own_tests.returncode == 0 and "4 passed" in own_tests.stdout, own_tests.stdout[-3000:]
    listed = subprocess.run([*GYM_SERVE, "list"], env={**env, "RAY_ADDRESS": "local"}, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert "letter_count                 gym-serve-letter-count 0.1.0 (letter_count:LetterCount)" in listed.stdout


def test_env_init_refuses_a_name_that_is_taken_or_not_a_package_name(tmp_path: Path) -> None:
    for name, why in [("math", "exists already"), ("json", "a Python module named `json`"), ("Bad-Name", "lowercase")]:
        result = subprocess.run([*GYM_SERVE, "env", "init", name, "--dir", str(tmp_path / "x")],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert result.returncode == 2 and why in result.stderr, (name, result.stderr)
    assert not (tmp_path / "x").exists()


def test_the_registry_finds_installed_environments_and_names_their_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pkgs").mkdir()
    (tmp_path / "pkgs" / "gs_test_broken_env.py").write_text("raise ImportError('needs a dependency not installed')\n")
    site = dist_info(
        tmp_path / "site",
        "gs-test-envs",
        {
            "gs_test_weather": "gym_serve.envs.example_single_tool_call:Weather",
            "gs_test_broken": "gs_test_broken_env:Nope",
            "math": "gym_serve.envs.example_single_tool_call:Weather",
        },
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    assert {"gs_test_weather", "gs_test_broken", "example_single_tool_call"} <= set(available_environments())
    assert load_environment_class("gs_test_weather").__name__ == "Weather"
    with pytest.raises(EnvError, match=r"`gs_test_broken` .*`gs-test-envs 0.1.0`\) failed to import: ImportError"):
        load_environment_class("gs_test_broken")
    with pytest.raises(EnvError, match=r"two environments are named `math`"):
        load_environment_class("math")
    with pytest.raises(EnvError, match=r"Did you mean `gs_test_weather`"):
        load_environment_class("gs_test_wether")
