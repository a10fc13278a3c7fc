"""gym-serve from this repository, as `pip install -e .` would import it, for a Python where it is not installed.

setup.py installs the repository's top-level `envs/`, `verifiers/` and `deployments/` as `gym_serve.envs`,
`gym_serve.verifiers` and `gym_serve.deployments`; a bare `PYTHONPATH=.` finds `gym_serve` but not those three.
Put this folder first on PYTHONPATH, then the repository (`PYTHONPATH=scripts/source_tree:.`): Python imports
`sitecustomize` at start-up, and this finder maps the three names to the folders beside it. The trainers' own
environments use it (their pins are not gym-serve's, so it is not installed there), and so does the test that
runs the documents' commands in a copy of the repository.
"""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
FOLDERS = {f"gym_serve.{name}": REPOSITORY / name for name in ("envs", "verifiers", "deployments")}


class RepositoryFolders:
    """A meta-path finder for the three mapped packages; every other name goes on to Python's own finders."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        folder = FOLDERS.get(name)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


sys.meta_path.insert(0, RepositoryFolders)
