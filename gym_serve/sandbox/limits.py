"""The walls of a workspace sandbox: what one may use, and how long it may live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """Limits of one workspace. Where each is enforced (cgroups as root, rlimits otherwise) is in the README.

    `wall_s` is an exec's default deadline; `ttl_s` how long a sandbox may sit with no call
    before the reaper removes it; `max_lifetime_s` how long it may live at all.
    """

    cpu_s: int = 60
    """CPU seconds of one process (RLIMIT_CPU)."""
    cpus: float = 1.0
    """CPU bandwidth of the whole sandbox (cgroup `cpu`, as root)."""
    memory_mb: int = 1024
    """The whole sandbox as root (cgroup `memory`); each process otherwise (RLIMIT_AS)."""
    max_processes: int = 256
    """The whole sandbox: cgroup `pids` as root; RLIMIT_NPROC of its own user namespace otherwise."""
    disk_mb: int = 512
    """Everything the sandbox writes (its writable layer and /tmp): the size of its tmpfs."""
    max_files: int = 50_000
    """Inodes of that tmpfs."""
    wall_s: float = 120.0
    output_bytes: int = 256 << 10
    """Of stdout and of stderr, per command; the rest is dropped and flagged."""
    ttl_s: float = 1800.0
    max_lifetime_s: float = 6 * 3600.0
    network: Literal["loopback", "none"] = "loopback"
    """`loopback`: a network namespace of its own with only `lo`; `none`: no socket but UNIX ones either."""

    def __post_init__(self) -> None:
        if self.network not in ("loopback", "none"):
            raise ValueError(f"network must be `loopback` or `none`, got `{self.network}`")
        for name in ("cpu_s", "memory_mb", "max_processes", "disk_mb", "max_files", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)}")
        for name in ("cpus", "wall_s", "ttl_s", "max_lifetime_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)}")
