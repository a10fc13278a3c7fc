"""Per-sandbox cgroups, where the provider may make them (as root, on a writable hierarchy).

A sandbox's memory, process count and CPU bandwidth are then bounded for the whole sandbox, not
per process: the provider puts the sandbox's PID 1 in a cgroup of its own before any command runs,
and every process it starts is born there. cgroup v1 (`memory`, `pids`, `cpu`) and v2 (a unified
hierarchy with those controllers) are both read. Each provider's cgroups live under one parent
named with its process's pid and its tag, made beneath the process's own cgroup; a provider whose
process died leaves that parent behind, and the next provider to start removes it (`_sweep_dead`).

A non-root provider cannot write cgroups: its sandboxes fall back to rlimits (README). The code verifier's
one-shot sandboxes get one each the same way (`oneshot.oneshot_cgroup`, parents tagged `oneshot`), and read
`Cgroup.oom_kills` to tell the code's memory running out from a harness that failed on its own.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["Cgroup", "CgroupRoot"]

_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "gym-serve-sandboxes-"
_V1 = ("memory", "pids", "cpu")


class Cgroup:
    """One sandbox's cgroup (in each controller's hierarchy, for v1)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    def add(self, pid: int) -> None:
        for folder in self.dirs:
            (folder / "cgroup.procs").write_text(str(pid))

    def usage(self) -> dict[str, int]:
        """Memory in use (bytes) and processes, as the kernel counts them."""
        found: dict[str, int] = {}
        for folder in self.dirs:
            for name, key in (
                ("memory.usage_in_bytes", "memory_bytes"), ("memory.current", "memory_bytes"),
                ("pids.current", "processes"),
            ):  # fmt: skip
                if (folder / name).exists():
                    found[key] = int((folder / name).read_text())
        return found

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has killed in it: its memory limit was reached (v1: `oom_control`'s
        `oom_kill`, v2: `memory.events`' `oom_kill`)."""
        for folder in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    lines = (folder / name).read_text().splitlines()
                except FileNotFoundError:
                    continue
                for line in lines:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def pids(self) -> set[int]:
        """The processes in it."""
        found: set[int] = set()
        for folder in self.dirs:
            try:
                found.update(int(pid) for pid in (folder / "cgroup.procs").read_text().split())
            except FileNotFoundError:
                pass
        return found

    def kill(self) -> None:
        """SIGKILL every process in it until none is left (each was born in it: all of them are the sandbox's).

        v2 has `cgroup.kill`; v1 is read and signalled until empty, each process through a pidfd opened while it
        is listed, so a pid reused outside the cgroup is never signalled.
        """
        for folder in self.dirs:
            if (folder / "cgroup.kill").exists():
                (folder / "cgroup.kill").write_text("1")
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    pidfd = os.pidfd_open(pid)
                except OSError:
                    continue  # gone already
                try:
                    if pid in self.pids():  # still this process (its pidfd holds it): the cgroup's
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except OSError:
                    pass
                finally:
                    os.close(pidfd)
            time.sleep(0.01)

    def remove(self) -> None:
        """Remove it once its processes are gone (they are being killed: give them a moment)."""
        for folder in self.dirs:
            _rmdir(folder)


class CgroupRoot:
    """The parent of one provider's cgroups, or `None` from `make()` where cgroups cannot be written."""

    def __init__(self, parents: dict[str, Path], version: int) -> None:
        self.parents = parents
        self.version = version

    @classmethod
    def make(cls, tag: str) -> CgroupRoot | None:
        if os.geteuid() != 0:
            return None
        own = _own_cgroups()
        if (_ROOT / "cgroup.controllers").exists():  # v2 only
            base = _ROOT / own.get("", "/").lstrip("/")
            if not {"memory", "pids", "cpu"} <= set((base / "cgroup.controllers").read_text().split()):
                return None
            parents = {"": base / f"{_PREFIX}{os.getpid()}-{tag}"}
            version = 2
        else:
            parents = {}
            for controller in _V1:
                if controller not in own or not (_ROOT / controller).is_dir():
                    return None
                parents[controller] = (
                    _ROOT / controller / own[controller].lstrip("/") / f"{_PREFIX}{os.getpid()}-{tag}"
                )
            version = 1
        try:
            for parent in parents.values():
                _sweep_dead(parent.parent)
                parent.mkdir(exist_ok=True)
            if version == 2:
                (parents[""] / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        except OSError:
            return None
        return cls(parents, version)

    def make_child(self, name: str, *, memory_bytes: int, max_processes: int, cpus: float | None) -> Cgroup:
        """A cgroup of its own: `memory_bytes` of memory and no swap, `max_processes` tasks, `cpus` of CPU
        bandwidth (`None`: no bound)."""
        dirs: list[Path] = []
        period = 100_000
        try:
            for controller, parent in self.parents.items():
                folder = parent / name
                folder.mkdir()
                dirs.append(folder)
                if self.version == 2:
                    (folder / "memory.max").write_text(str(memory_bytes))
                    (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
                    (folder / "pids.max").write_text(str(max_processes))
                    (folder / "cpu.max").write_text(f"{int(cpus * period)} {period}") if cpus is not None else None
                elif controller == "memory":
                    (folder / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    if (folder / "memory.memsw.limit_in_bytes").exists():  # memory and swap together: no swap beyond
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                elif controller == "pids":
                    (folder / "pids.max").write_text(str(max_processes))
                elif cpus is not None:
                    (folder / "cpu.cfs_period_us").write_text(str(period))
                    (folder / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
        except OSError:  # none half made is left behind
            for folder in dirs:
                _rmdir(folder)
            raise
        return Cgroup(dirs)

    def remove(self) -> None:
        for parent in self.parents.values():
            for child in parent.iterdir() if parent.is_dir() else []:
                if child.is_dir():
                    _rmdir(child)
            _rmdir(parent)


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller (and `""` for v2), from /proc/self/cgroup."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _sweep_dead(folder: Path) -> None:
    """Remove the cgroups of providers whose process is gone (a replica that was killed)."""
    for entry in folder.glob(f"{_PREFIX}*"):
        pid = entry.name.removeprefix(_PREFIX).split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            for child in entry.iterdir():
                if child.is_dir():
                    _rmdir(child)
            _rmdir(entry)


def _rmdir(folder: Path) -> None:
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)  # processes still leaving it
