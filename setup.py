"""gym-serve's packages: `gym_serve/`, plus three top-level folders installed under its name.

`envs/`, `verifiers/` and `deployments/` sit at the top of the repository, where people look for them, and
install as `gym_serve.envs`, `gym_serve.verifiers` and `gym_serve.deployments`: the distribution claims no
generic top-level import name (PrimeIntellect's `verifiers` installs beside it). Every file has that one
installed name. pyproject.toml cannot prefix the packages it finds, so they are listed here; everything else
is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = {"gym_serve.envs": "envs", "gym_serve.verifiers": "verifiers", "gym_serve.deployments": "deployments"}
"""Installed package → the repository folder that holds it."""

EXCLUDED = ["*.__pycache__", "*.__pycache__.*"]

packages = find_namespace_packages(include=["gym_serve", "gym_serve.*"], exclude=EXCLUDED)
for package, folder in FOLDERS.items():
    packages += [package] + [f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=EXCLUDED)]

setup(packages=packages, package_dir=FOLDERS)
