"""`SandboxProvider`: the interface every kind of sandbox implements, and the values that cross it.

The local provider (`gym_serve.sandbox.local.LocalProvider`) is the one built here; the Sandbox
tier puts it behind Serve handles (`gym_serve.calls.sandboxes.SandboxTierClient`), and a remote
provider (E2B, Modal, Daytona, a Kubernetes pod) implements the same methods. What a provider must
guarantee is in `gym_serve/sandbox/README.md`.

Every value here is plain data (frozen dataclasses of str, int, bytes, tuples): it pickles across
Ray, and a remote provider can send it as JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

from gym_serve.sandbox.limits import Limits

__all__ = ["Base", "BaseFile", "Endpoint", "ExecResult", "FileEntry", "ProcessState", "SandboxProvider"]


@dataclass(frozen=True)
class BaseFile:
    """One entry of a base the provider builds: a host file or folder copied in, a symlink, or text."""

    dest: str
    copy: str | None = None
    symlink: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.copy, self.symlink, self.text)) != 1:
            raise ValueError(f"base file `{self.dest}`: give exactly one of copy, symlink, text")
        if self.dest.startswith("/") or ".." in self.dest.split("/"):
            raise ValueError(f"base file `{self.dest}`: a path relative to the base, without `..`")


@dataclass(frozen=True)
class Base:
    """What a sandbox starts from: the read-only lower layer of its workspace (`/workspace`).

    Either `folder`, a host folder used in place (its files keep their host owners: the sandbox
    can change only those owned by its user, `nobody` when the provider runs as root), or
    `files`, which the provider copies into its own memory once (the sandbox's user owns them).
    `binds` are further host folders, read-only at fixed paths outside the workspace (tools, a
    test runner the workspace cannot change); `env` is every command's environment.
    """

    folder: str | None = None
    files: tuple[BaseFile, ...] = ()
    binds: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    name: str = ""
    """A label for logs and benchmarks; the base's identity is its content (`key`)."""

    def __post_init__(self) -> None:
        if (self.folder is None) == (not self.files):
            raise ValueError("a base is a `folder` or `files`, exactly one")
        for _, dest in self.binds:
            if not dest.startswith("/") or dest.startswith(("/workspace", "/tmp", "/proc", "/dev", "/.")):
                raise ValueError(f"a bind's destination must be an absolute path outside the workspace: `{dest}`")

    @property
    def key(self) -> str:
        """A short name for the base's content (what a warm pool is kept for)."""
        content = {k: v for k, v in asdict(self).items() if k != "name"}
        return "b" + hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Endpoint:
    """A host UNIX socket a sandbox may reach (a gateway's session endpoint): bound at `path` inside, and served
    on `127.0.0.1:port` inside by the supervisor's forwarder (for clients that speak only TCP)."""

    socket: str
    port: int | None = None
    path: str = "/run/gateway.sock"


@dataclass(frozen=True)
class ExecResult:
    """What a command did: its exit, its capped output, and whether either cap or the deadline cut it."""

    exit_code: int | None
    stdout: str
    stderr: str
    signal: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    wall_s: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class ProcessState:
    """A started command: still running, or ended with its result."""

    pid: int
    running: bool
    result: ExecResult | None = None


@dataclass(frozen=True)
class FileEntry:
    name: str
    kind: str
    """`file`, `dir` or `link`."""
    size: int = 0


@runtime_checkable
class SandboxProvider(Protocol):
    """Workspaces for rollouts: create (from a warm pool), exec, files, fork, snapshot, destroy.

    Ids are opaque strings. Every method raises `SandboxGone` for an id that is not live.
    """

    async def create(
        self,
        base: Base,
        *,
        limits: Limits | None = None,
        snapshot: str | None = None,
        endpoints: tuple[Endpoint, ...] = (),
        holder: object | None = None,
    ) -> str:
        """A new sandbox over `base` (and a snapshot's layers, when given); its id."""
        ...

    async def exec(
        self,
        sandbox: str,
        command: str | list[str],
        *,
        timeout_s: float | None = None,
        stdin: bytes = b"",
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command (a string runs under `/bin/sh -c`) to its end or its deadline."""
        ...

    async def start_process(
        self,
        sandbox: str,
        command: str | list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes = b"",
    ) -> int:
        """Start a long-running command (a harness); its pid for `wait` and `kill`."""
        ...

    async def wait_process(self, sandbox: str, pid: int, *, timeout_s: float | None = None) -> ProcessState:
        """Wait for a started command, at most `timeout_s`."""
        ...

    async def kill_process(self, sandbox: str, pid: int) -> None:
        """End a started command (its whole process group)."""
        ...

    async def kill_all(self, sandbox: str) -> None:
        """End every process in the sandbox (what a rollout left running: before its verdict is taken)."""
        ...

    async def read_file(self, sandbox: str, path: str) -> bytes: ...

    async def write_file(
        self, sandbox: str, path: str, data: bytes, *, mode: int = 0o644, make_dirs: bool = False
    ) -> None: ...

    async def list_files(self, sandbox: str, path: str = ".") -> list[FileEntry]: ...

    async def snapshot(self, sandbox: str) -> str:
        """An immutable, addressable copy of the sandbox's files now (a new sandbox can start from it)."""
        ...

    async def drop_snapshot(self, snapshot: str) -> None:
        """Let go of a snapshot (its layer goes when no sandbox started from it is left)."""
        ...

    async def fork(self, sandbox: str, n: int) -> list[str]:
        """`n` new sandboxes starting from this one's files (copy-on-write: only what it changed is copied)."""
        ...

    async def destroy(self, sandbox: str) -> None:
        """End the sandbox: no process, mount or file of it is left. Destroying one that is gone is no error."""
        ...
