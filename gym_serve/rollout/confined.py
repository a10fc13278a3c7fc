"""Harness programs as confined subprocesses: a private workspace, and `exec` in it. The sandbox until there is one.

`ConfinedWorkspaces.open(address)` gives a `ConfinedWorkspace`: a folder of the rollout's own (mode 0700,
removed by `close`), the base URL through which a program there reaches its gateway session, and `exec`:
the `gym_serve.rollout.workspace` interface a harness episode uses, which a Sandbox-tier workspace
(`gym_serve.calls.sandbox_workspaces`) implements too.

What `exec` gives a program (`_confine_launcher.py` sets it up):

- a session and process group of its own, an environment of exactly the variables it is given over the
  workspace's own (`PATH`: gym-serve's environment's `bin` first, then the replica's; `HOME` and `TMPDIR`:
  the workspace; no inherited secrets), rlimits, its workspace as working folder, standard streams kept up to
  a cap;
- in `namespaces` isolation: new network, mount and PID namespaces. Its network has only loopback, where its
  gateway session is relayed to the gateway replica's Unix socket: no other port of this machine or the
  cluster, no other address, is reachable. Ray's session folder (its sockets) and `/dev/shm` are empty
  there. When the program ends, or is killed, everything it started dies with its namespace;
- in `process` isolation (namespaces unavailable): its process group is killed when it ends; a process
  that left the group (`setsid`) is not tracked, and the network is the host's.

A program past its deadline, or whose rollout is cancelled, is killed with its group (and namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from gym_serve.errors import HarnessError
from gym_serve.rollout.gateway_session import SessionAddress
from gym_serve.rollout.harness_config import Limits
from gym_serve.rollout.workspace import ExecResult

__all__ = ["ConfinedWorkspace", "ConfinedWorkspaces", "namespaces_available"]

LAUNCHER = Path(__file__).with_name("_confine_launcher.py")
FORWARD_PORT = 41_111
"""The port a namespace-confined program's gateway session is on (its own loopback: no other user of it)."""
WORKSPACES = Path(tempfile.gettempdir()) / "gym-serve-harness"
Isolation = Literal["namespaces", "process"]
_DRAIN_S = 5.0


@functools.cache
def namespaces_available() -> bool:
    """Can this process confine a program in namespaces (a quick trial run of the launcher)?"""
    spec = _spec(["true"], {"PATH": os.defpath}, "/", Limits(), namespaces=True, forward=None)
    try:
        done = subprocess.run([sys.executable, "-I", str(LAUNCHER), spec], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _spec(
    argv: list[str], env: dict[str, str], cwd: str, limits: Limits, *, namespaces: bool, forward: str | None
) -> str:
    return orjson.dumps(
        {
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "limits": limits.model_dump(),
            "namespaces": namespaces,
            "forward": {"port": FORWARD_PORT, "socket": forward} if forward else None,
            "hide": _hidden() if namespaces else [],
        }
    ).decode()


def _hidden() -> list[str]:
    """Folders a confined program must not see: Ray's temporary root (its sockets, logs, object store) and
    shared memory."""
    ray_root = os.environ.get("RAY_TMPDIR") or str(Path(tempfile.gettempdir()) / "ray")
    return [ray_root, "/dev/shm"]


@dataclass
class ConfinedWorkspace:
    """One rollout's folder, and how its programs reach the gateway; see the module docstring."""

    path: Path
    isolation: Isolation
    gateway_url: str
    """The gateway's root URL as a program here reaches it (`http://127.0.0.1:PORT`)."""
    limits: Limits = field(default_factory=Limits)
    socket: str | None = None
    _running: set[asyncio.subprocess.Process] = field(default_factory=set)

    async def exec(
        self, argv: list[str], env: dict[str, str], *, stdin: bytes | None, timeout_s: float, max_output_bytes: int
    ) -> ExecResult:
        """Run `argv` here, confined, with `env` over the workspace's own; kill it (and all it started) at
        `timeout_s`."""
        namespaces = self.isolation == "namespaces"
        env = {"PATH": _search_path(), "HOME": str(self.path), "TMPDIR": str(self.path), **env}
        argv = [_program(argv[0]), *argv[1:]]
        spec = _spec(argv, env, str(self.path), self.limits, namespaces=namespaces, forward=self.socket)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", str(LAUNCHER), spec,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={}, cwd=self.path, start_new_session=True,
        )  # fmt: skip
        self._running.add(process)
        out, err = _Tail(max_output_bytes), _Tail(max_output_bytes)
        streams = asyncio.gather(_feed(process, stdin), out.read(process.stdout), err.read(process.stderr))
        timed_out = False
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
        finally:
            _kill(process)  # whatever stayed in its group (and, with namespaces, its PID 1 and so all of it)
            self._running.discard(process)
            try:  # what it wrote before it ended; a process that left its group may hold a pipe open
                await asyncio.wait_for(asyncio.shield(streams), _DRAIN_S)
            except TimeoutError:
                streams.cancel()
        return ExecResult(
            exit_status=None if timed_out else process.returncode,
            stdout=out.text(),
            stderr=err.text(),
            truncated=out.cut or err.cut,
            timed_out=timed_out,
        )

    async def write_text(self, name: str, text: str) -> None:
        (self.path / name).write_text(text)

    async def snapshot(self, max_files: int, max_bytes: int) -> dict[str, str]:
        """The workspace's regular files as text (links never followed: nothing outside the folder is read)."""
        files: dict[str, str] = {}
        total = 0
        for folder, dirs, names in os.walk(self.path, followlinks=False):
            dirs.sort()
            for name in sorted(names):
                path = Path(folder) / name
                if len(files) >= max_files:
                    return files
                try:
                    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                with os.fdopen(descriptor, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        continue
                    data = f.read(max_bytes - total + 1)
                if total + len(data) > max_bytes:
                    return files
                total += len(data)
                files[str(path.relative_to(self.path))] = data.decode(errors="replace")
        return files

    async def close(self) -> None:
        """Kill anything still running here and remove the folder."""
        for process in list(self._running):
            _kill(process)
        shutil.rmtree(self.path, ignore_errors=True)


class ConfinedWorkspaces:
    """Opens confined workspaces with the isolation asked for (`auto`: namespaces where the kernel allows)."""

    def __init__(self, isolation: Literal["auto", "namespaces", "process"] = "auto", limits: Limits | None = None):
        self.isolation = isolation
        self.limits = limits or Limits()

    async def open(self, address: SessionAddress) -> ConfinedWorkspace:
        """A new workspace whose programs reach the session's gateway replica over TCP or its Unix socket."""
        gateway_url, socket = address.base_url, address.socket
        WORKSPACES.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="rollout-", dir=WORKSPACES))
        reachable = socket is not None and Path(socket).exists()
        wanted = self.isolation
        if wanted == "auto":
            wanted = "namespaces" if reachable and namespaces_available() else "process"
        if wanted == "namespaces":
            if not reachable:
                raise RuntimeError(
                    f"the gateway's Unix socket {socket} is not on this node: `isolation: namespaces` needs the "
                    "Gateway replica on the Agent replica's node (or use `process`)"
                )
            return ConfinedWorkspace(path, "namespaces", f"http://127.0.0.1:{FORWARD_PORT}", self.limits, socket)
        return ConfinedWorkspace(path, "process", gateway_url, self.limits)


def _search_path() -> str:
    """Programs installed beside gym-serve (its environment's `bin`) first, then the replica's own PATH."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])


def _program(name: str) -> str:
    """A program named without a folder, found as the harness's PATH finds it (a missing one is named)."""
    if os.sep in name:
        return name
    found = shutil.which(name, path=_search_path())
    if found is None:
        raise HarnessError(f"the harness program `{name}` is not installed here (searched {_search_path()})")
    return found


class _Tail:
    """A stream's last `cap` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.cut = False

    async def read(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self.data += chunk
            if len(self.data) > self.cap:
                del self.data[: len(self.data) - self.cap]
                self.cut = True

    def text(self) -> str:
        return self.data.decode(errors="replace")


async def _feed(process: asyncio.subprocess.Process, stdin: bytes | None) -> None:
    if stdin is None or process.stdin is None:
        return
    # a program may exit before it reads its task; uvloop (Serve's loop) says so with RuntimeError
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
        process.stdin.write(stdin)
        await process.stdin.drain()
    process.stdin.close()


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
