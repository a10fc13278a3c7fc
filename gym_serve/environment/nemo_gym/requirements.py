"""A hosted server's own packages, installed per deployment by Ray (`runtime_env`), never into gym-serve's environment.

NeMo Gym gives each server a virtual environment built from its
`requirements.txt`. Ray does the same for a deployment's replicas:
`runtime_env={"pip": [...]}` (or `"uv"`) builds an environment over the
cluster's Python, cached by its contents, and starts the replicas in it.
`runtime_env(server)` is that field for a server:

- the lines of its `requirements.txt` that name a distribution not installed
  here (what is installed already stays as it is: a server's pin of a package
  gym-serve uses never replaces gym-serve's);
- pins of the versions installed here of what gym-serve and NeMo Gym depend on,
  so that no requirement upgrades them in the replica's environment (NeMo Gym
  pins its parent's `ray` and `openai` into each server's environment the same way).

`problems(server)` is the deploy-time check: the lines that cannot be installed
from the package registries, each named with why (a git or other URL, not on
the registries, no version that fits), and modules the server imports that no
line provides (what only a system package or a manual install gives).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import subprocess
import sys
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from gym_serve.environment.nemo_gym import catalog
from gym_serve.errors import EnvError

__all__ = ["Installer", "check_installable", "problems", "runtime_env", "to_install"]

Installer = Literal["pip", "uv"]

_KEPT = ("gym-serve", "nemo-gym")
"""Whose dependencies keep their installed versions in a server's environment."""


def to_install(server: str) -> list[str]:
    """The lines of the server's requirements (`catalog.requirements`) that name a distribution not installed here."""
    return [line for line, requirement in _lines(server) if _installed(requirement.name) is None]


def runtime_env(server: str, installer: Installer = "pip") -> dict[str, Any]:
    """The `runtime_env` of a deployment hosting `server` (see the module docstring); `{}` when nothing is missing."""
    packages = to_install(server)
    if not packages:
        return {}
    packages += _kept_pins()
    if installer == "uv":
        return {"uv": {"packages": packages}}
    return {"pip": {"packages": packages, "pip_check": False}}


def problems(server: str) -> list[str]:
    """What cannot be installed for `server` from the package registries, one sentence each (empty: all can)."""
    found = []
    lines = _lines(server)
    for line, requirement in lines:
        if _installed(requirement.name) is not None:
            continue
        if requirement.url or _is_url(line):
            found.append(f"`{line}`: a URL, not a package on the registries (install it into the image yourself)")
            continue
        available = _versions(requirement.name)
        if available is None:
            found.append(f"`{line}`: `{requirement.name}` is not on the package registries")
        elif not any(requirement.specifier.contains(v, prereleases=True) for v in available):
            found.append(f"`{line}`: no version on the registries fits (they have {', '.join(available[:5])})")
    provided = {canonicalize_name(r.name) for _, r in lines}
    for module in catalog.missing_modules(server):
        if canonicalize_name(module) not in provided and not _provided_by_a_line(module, lines):
            found.append(
                f"module `{module}`: imported by the server, provided by no line of its requirements "
                "(a system package, or a package it forgot to list)"
            )
    return found


def check_installable(server: str) -> None:
    """Raise `EnvError` naming every requirement of `server` that cannot be installed (see `problems`)."""
    found = problems(server)
    if found:
        files = catalog.requirement_files(catalog.server_dir(server))
        raise EnvError(f"NeMo Gym server `{server}` needs what cannot be installed: {'; '.join(found)}. ({files})")


def _lines(server: str) -> list[tuple[str, Requirement]]:
    return catalog.requirements(catalog.server_dir(server))


def _is_url(line: str) -> bool:
    return "://" in line or line.startswith("git+")


def _provided_by_a_line(module: str, lines: list[tuple[str, Requirement]]) -> bool:
    """Whether a listed distribution is known to provide `module` (a distribution not installed cannot tell us
    which modules it holds, so its name is matched loosely: `scikit-learn` gives `sklearn`, `beautifulsoup4`
    gives `bs4`, `rouge-score` gives `rouge_score`)."""
    key = canonicalize_name(_ALIASES.get(module, module)).replace("-", "")
    for _, requirement in lines:
        name = canonicalize_name(requirement.name).replace("-", "")
        if key in name or name in key:
            return True
    return False


_ALIASES = {"sklearn": "scikit-learn", "bs4": "beautifulsoup4", "yaml": "pyyaml", "PIL": "pillow", "safe": "safe-mol"}


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _kept_pins() -> list[str]:
    pins = {}
    for owner in _KEPT:
        for line in importlib.metadata.requires(owner) or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and "extra" in str(requirement.marker):
                continue
            version = _installed(requirement.name)
            if version is not None:
                pins[canonicalize_name(requirement.name)] = f"{requirement.name}=={version}"
    return sorted(pins.values())


@functools.cache
def _versions(distribution: str) -> list[str] | None:
    """The versions of `distribution` the package registries offer (newest first); None if they have none."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", distribution],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    match = re.search(r"Available versions: (.*)", done.stdout)
    if done.returncode != 0 or match is None:
        return None
    versions = []
    for text in match[1].split(","):
        try:
            versions.append(str(Version(text.strip())))
        except InvalidVersion:
            continue
    return versions
