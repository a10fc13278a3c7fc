"""One program, run once in a fresh sandbox to its end: how the code verifier runs its harness.

Two isolation modes (`isolation()`):

- `namespaces`: the program is PID 1 of new user, PID, network, IPC and UTS namespaces made by
  bwrap over the read-only view (`host.view`: the system's directories and the interpreter's),
  with a tmpfs of `disk_mb` (and `max_files` inodes) over `/tmp`, its only writable place, gone
  with the namespace. It starts as the namespace's root, to mount that tmpfs, and must drop its
  capabilities itself before it runs anything untrusted (`_confine.confine_harness`). It dies
  with its caller (a parent-death signal), and every process in the namespace dies with it.
- `fallback` (user namespaces refused, e.g. a non-root container): the program is a plain child
  of the caller, in a session of its own, with a private work dir (`make_work_dir`); what it
  leaves in that session is killed (`kill_session`) and the work dir removed by the caller.

As root, either way, it runs as `nobody` (`host.identity`), and may run in a cgroup of its own
(`oneshot_cgroup`, `in_cgroup`): the memory and the tasks of the whole sandbox are bounded there, not only
each runner's by its rlimits (memory a runner holds without mapping it, e.g. files on the namespace's
tmpfs, is counted there too), and the kernel's OOM killer acts inside it (`Cgroup.oom_kills`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from functools import lru_cache
from pathlib import Path

from gym_serve.sandbox import host
from gym_serve.sandbox.cgroups import Cgroup, CgroupRoot

__all__ = [
    "HARNESS_PROCESSES",
    "ISOLATION_ENV",
    "confine_source",
    "in_cgroup",
    "isolation",
    "kill_session",
    "make_work_dir",
    "namespace_command",
    "oneshot_cgroup",
    "signal_group",
]

ISOLATION_ENV = "GYM_SERVE_SANDBOX_ISOLATION"
"""`fallback` forces the fallback isolation (to test it, or where namespaces misbehave); `namespaces` insists."""

# Mount the size-limited tmpfs, make /dev read-only too (the root and every bind already are), then become the
# program (`exec`: it is PID 1 of the namespace, so its end is the end of every process in it).
_MOUNT_SCRIPT = r"""
Q=$1; N=$2; shift 2
mount -t tmpfs -o "size=$Q,nr_inodes=$N,mode=1777" sandbox /tmp && mount -o remount,bind,ro /dev && cd / || exit 97
exec "$@"
"""


HARNESS_PROCESSES = 16
"""The tasks a one-shot sandbox's own processes take beside its runners' `max_processes` (`pids.max` counts
threads too): the shell, `setpriv` and bwrap it starts from, the harness, the fallback's reaper."""

# Put the shell in each of the cgroup's `cgroup.procs` (its arguments up to `--`), then become the command: it
# keeps this pid, so the sandbox and everything it starts are born in the cgroup. Run as root, before `setpriv`.
_CGROUP_SCRIPT = r"""
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do echo $$ > "$1" || exit 98; shift; done
[ "$#" -gt 1 ] || exit 98
shift
exec "$@"
"""

_cgroups_lock = threading.Lock()
_cgroups: tuple[int, CgroupRoot | None] | None = None  # (the pid that made it, the parent of its cgroups)


def _cgroup_root() -> CgroupRoot | None:
    """This process's parent of one-shot cgroups, made on first use (as root, where a hierarchy is writable)."""
    global _cgroups
    with _cgroups_lock:
        if _cgroups is None or _cgroups[0] != os.getpid():  # a forked child makes its own (named with its pid)
            root = CgroupRoot.make("oneshot")
            if root is not None:
                atexit.register(_remove_root, os.getpid(), root)
            _cgroups = (os.getpid(), root)
        return _cgroups[1]


def _remove_root(pid: int, root: CgroupRoot) -> None:
    if os.getpid() == pid:  # a forked child inherits the handler, never the parent's cgroups
        root.remove()


def oneshot_cgroup(memory_bytes: int, max_processes: int, *, cpus: float | None = None) -> Cgroup | None:
    """A fresh cgroup for one one-shot sandbox (`memory_bytes`, no swap, `max_processes` tasks, `cpus` of
    bandwidth or none), or `None` where this process cannot make one (not root, no writable hierarchy).

    Start the sandbox with `in_cgroup(cgroup, command)`; after it ended, `cgroup.kill()` then `cgroup.remove()`.
    Blocking (file writes): from a coroutine, `asyncio.to_thread`.
    """
    root = _cgroup_root()
    if root is None:
        return None
    name = f"run-{uuid.uuid4().hex[:16]}"
    return root.make_child(name, memory_bytes=memory_bytes, max_processes=max_processes, cpus=cpus)


def in_cgroup(cgroup: Cgroup | None, command: list[str]) -> list[str]:
    """`command`, run from a shell that first moves itself into `cgroup` (`command` unchanged for `None`).

    The shell runs as the caller (root: it must be placed before `setpriv` drops to `nobody`) and `exec`s the
    command, so the sandbox's first process is in the cgroup before it runs anything. A shell that cannot join
    exits 98 and nothing runs.
    """
    if cgroup is None:
        return command
    procs = [str(folder / "cgroup.procs") for folder in cgroup.dirs]
    return ["/bin/sh", "-c", _CGROUP_SCRIPT, "cgroup", *procs, "--", *command]


def confine_source() -> str:
    """The kernel walls' module (`_confine.py`), as source: it runs inside the sandbox, under its interpreter."""
    return _source("_confine.py")


@lru_cache(maxsize=4)
def _source(name: str) -> str:
    return (Path(__file__).parent / name).read_text()


def namespace_command(
    program: list[str], *, disk_mb: int, max_files: int, binds: tuple[tuple[str, str], ...] = ()
) -> list[str]:
    """The command line that runs `program` as PID 1 of a fresh sandbox (the `namespaces` mode), with the host's
    `binds` (source, destination) read-only in its view too."""
    extra = [part for source, dest in binds for part in ("--ro-bind", source, dest)]
    return [
        *host.identity(), host.bwrap(),
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--uid", "0", "--gid", "0", "--die-with-parent", "--as-pid-1",
        "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",  # to mount /tmp, then to drop every capability
        *host.view(python="path"), *extra,
        "--proc", "/proc", "--dev", "/dev", "--dir", "/tmp", "--remount-ro", "/", "--chdir", "/",
        "--", "/bin/sh", "-c", _MOUNT_SCRIPT, "sandbox", f"{disk_mb}m", str(max_files), *program,
    ]  # fmt: skip


@lru_cache(maxsize=1)
def _probe() -> str:
    try:
        command = namespace_command(["/bin/sh", "-c", "true"], disk_mb=1, max_files=16)
        probe = subprocess.run(command, env=host.minimal_env("/"), capture_output=True, timeout=10)
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return "fallback"
    return "namespaces" if probe.returncode == 0 else "fallback"


def isolation() -> str:
    """`namespaces` if bwrap can make user/PID/net/mount namespaces here (probed once), else `fallback`."""
    forced = os.environ.get(ISOLATION_ENV)
    if forced in ("namespaces", "fallback"):
        return forced
    return _probe()


def make_work_dir() -> str:
    """A fresh private directory the sandbox user owns (fallback only: a namespace gets its own tmpfs)."""
    work = tempfile.mkdtemp(prefix="gs-sandbox-")
    if host.runs_as_root():
        os.chown(work, host.NOBODY, host.NOBODY)
    os.chmod(work, 0o700)
    return work


def remove_work_dir(work: str) -> None:
    shutil.rmtree(work, ignore_errors=True)


def kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` until none is left (its id stays taken while any member lives)."""
    for _ in range(20):
        members = _session_members(sid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
            except OSError:
                continue
            if len(fields) > 3 and int(fields[3]) == sid and fields[0] != b"Z":  # state, ppid, pgrp, session
                members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
