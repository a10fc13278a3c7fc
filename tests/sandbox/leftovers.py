"""What a provider's sandboxes could leave on this machine: processes, mounts, cgroups.

Every process of a provider (its keeper, each sandbox's supervisor) carries the provider's tag in
its command line (`gs-sandbox-tag=...`), and so do its cgroups' parents; commands a test starts
carry a tag of the test's. Mounts: the host's mount table (a sandbox's mounts are in namespaces of
its own, so none may appear there).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.verifiers.callers import processes_with


def cgroups_of(tag: str) -> list[Path]:
    root = Path("/sys/fs/cgroup")
    return sorted(p for p in root.rglob(f"gym-serve-sandboxes-*-{tag}") if p.is_dir()) if root.is_dir() else []


def left(tags: tuple[str, ...], mounts_before: str, *, settle_s: float = 15.0) -> dict[str, object]:
    """What the providers tagged `tags` (and commands tagged so) left: empty when nothing; waits up to `settle_s`."""
    deadline = time.monotonic() + settle_s
    while True:
        found: dict[str, object] = {
            "processes": sorted(pid for tag in tags for pid in processes_with(tag)),
            "cgroups": [str(p) for tag in tags for p in cgroups_of(tag)],
            "mounts": sorted(set(Path("/proc/mounts").read_text().splitlines()) - set(mounts_before.splitlines())),
        }
        found = {k: v for k, v in found.items() if v}
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def mounts() -> str:
    return Path("/proc/mounts").read_text()
