"""gym-serve installs one import name, `gym_serve`: PrimeIntellect's `verifiers` installs beside it.

The repository keeps its top-level `verifiers/`, `envs/` and `deployments/` folders; the distribution puts
them under `gym_serve` (`gym_serve.verifiers`, ...). The README's test command installs PrimeIntellect's
package (`pip install --no-deps verifiers==0.4.0`: its top-level `import verifiers` needs none of its
dependencies) into the same environment; both are imported in one process here, from a folder other than
the repository root (whose own `verifiers/` folder would shadow theirs on `sys.path`).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import REPO

THEIRS = "0.4.0"


def test_primeintellects_verifiers_and_ours_import_in_one_process(tmp_path: Path) -> None:
    try:
        version = metadata.version("verifiers")
    except metadata.PackageNotFoundError:
        pytest.fail(
            f"PrimeIntellect's `verifiers` is not installed: `pip install --no-deps verifiers=={THEIRS}` (README)"
        )
    code = (
        "import json, verifiers, gym_serve.verifiers.math\n"
        "print(json.dumps([verifiers.__file__, verifiers.__version__, gym_serve.verifiers.math.__file__]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    theirs, their_version, ours = json.loads(result.stdout)
    assert version == their_version == THEIRS
    installed = Path(str(metadata.distribution("verifiers").locate_file("verifiers/__init__.py"))).resolve()
    assert Path(theirs).resolve() == installed != (REPO / "verifiers" / "__init__.py").resolve()
    assert Path(ours).resolve() == (REPO / "verifiers" / "math.py").resolve()


@pytest.mark.timeout(180)
def test_the_wheel_holds_gym_serve_and_nothing_else(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: building in the checkout would leave build/ there
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source, check=True, capture_output=True, timeout=170,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("gym_serve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"gym_serve", wheel.name.split("-py3")[0] + ".dist-info"}
    for module in ("gym_serve/verifiers/math.py", "gym_serve/envs/math/__init__.py", "gym_serve/deployments/app.py"):
        assert module in names, f"{module} is not in the wheel"
    for page in ("gym_serve/viewer/templates/tasks.html", "gym_serve/viewer/static/viewer.js"):  # `gym-serve view`
        assert page in names, f"{page} is not in the wheel"


def test_each_file_has_one_name_the_installed_one() -> None:
    """`envs/`, `verifiers/` and `deployments/` are `gym_serve.envs`, ... by setup.py's package-dir mapping (in the
    editable install too): nothing in the repository links one path to another."""
    staged = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert [line for line in staged.splitlines() if line.startswith("120000")] == [], "a symbolic link is tracked"
    for folder in ("envs", "verifiers", "deployments"):
        package = importlib.import_module(f"gym_serve.{folder}")
        assert Path(str(package.__file__)).resolve() == (REPO / folder / "__init__.py").resolve()
