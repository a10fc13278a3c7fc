"""`LocalProvider`: workspace sandboxes on this machine, made by bubblewrap and held by a keeper.

Each provider (one per process that holds sandboxes: a Sandbox replica, a test, a benchmark) starts
a *keeper* (`_keeper.py`): root of a user namespace of its own whose private tmpfs holds every layer:
the bases it built, the snapshots, and one tmpfs per sandbox sized to its disk quota. The keeper
starts each sandbox's bwrap; each sandbox's PID 1 is a *supervisor* (`_supervisor.py`) that the
provider talks to over a UNIX socket. The chain of parent-death signals (this process → keeper →
bwrap → supervisor → the namespace) means that however this process ends, every process of every
sandbox ends and every layer is freed by the kernel: nothing is ever written to the host's disk.

- **Warm pools.** Spawning bwrap and the supervisor's interpreter is most of a cold create; the
  provider keeps `warm` of them ready per (base, limits), so a create is one message: the
  supervisor mounts the workspace (an overlay of the base and any snapshot layers under the
  sandbox's own layer) and raises its walls.
- **Snapshots and forks.** A snapshot is the keeper's copy of a sandbox's writable layer: only
  what it changed. It becomes a lower layer of any sandbox made from it (`lowerdir=snap:base`),
  so `fork(n)` is one copy and `n` warm creates.
- **Limits.** As root: a cgroup per sandbox (memory, processes, CPU bandwidth); otherwise
  rlimits (per process) in the supervisor. Disk: the sandbox's tmpfs. Time: an exec's deadline,
  an idle TTL and a maximum lifetime (the reaper), and the holder's life when one is given.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import itertools
import json
import logging
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from gym_serve.sandbox import host
from gym_serve.sandbox.cgroups import Cgroup, CgroupRoot
from gym_serve.sandbox.errors import (
    BaseNotFound,
    ForkLimitExceeded,
    IsolationUnavailable,
    SandboxCapacity,
    SandboxError,
    SandboxGone,
    error_named,
)
from gym_serve.sandbox.limits import Limits
from gym_serve.sandbox.provider import Base, Endpoint, ExecResult, FileEntry, ProcessState

__all__ = ["LocalProvider"]

log = logging.getLogger(__name__)

_HERE = Path(__file__).parent
_LAYERS = "/.layers"
_REPLY_GRACE_S = 10.0
"""How long past a command's own deadline the provider waits for its supervisor before calling it gone."""

HolderCheck = Callable[[object], Awaitable[bool]]


@lru_cache(maxsize=4)
def _source(name: str) -> str:
    return (_HERE / name).read_text()


@dataclass
class _Sandbox:
    """One sandbox as the provider sees it."""

    id: str
    name: str
    base: Base
    limits: Limits
    endpoints: tuple[Endpoint, ...]
    channel: _Channel
    cgroup: Cgroup | None
    host_pid: int
    snapshots: list[str] = field(default_factory=list)
    """The snapshot layers under its own, newest first."""
    holder: object | None = None
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    walls: list[str] = field(default_factory=list)
    cow: str = ""


class LocalProvider:
    """Workspaces on this machine (see the module docstring). Use as an async context manager, or `start`/`close`.

    `prefix` starts every id it gives (a Sandbox replica names itself there, so a call can be routed to
    it). `cow` forces `copy` (the fallback where the kernel refuses an unprivileged overlay) or
    `overlay`; `auto` tries the overlay. `holder_alive`, given, is asked about each sandbox's holder on
    every sweep: a holder that is gone takes its sandboxes with it.
    """

    def __init__(
        self,
        *,
        prefix: str = "local",
        warm: int = 2,
        max_sandboxes: int = 512,
        max_fork: int = 64,
        default_limits: Limits | None = None,
        cow: str = "auto",
        sweep_every_s: float = 1.0,
        holder_alive: HolderCheck | None = None,
        use_cgroups: bool = True,
    ) -> None:
        if cow not in ("auto", "overlay", "copy"):
            raise ValueError(f"cow must be `auto`, `overlay` or `copy`, got `{cow}`")
        self.prefix = prefix
        self.warm = warm
        self.max_sandboxes = max_sandboxes
        self.max_fork = max_fork
        self.default_limits = default_limits or Limits()
        self.cow = "overlay" if cow == "auto" else cow
        self.sweep_every_s = sweep_every_s
        self.holder_alive = holder_alive
        self.use_cgroups = use_cgroups
        self.tag = uuid.uuid4().hex[:12]
        """Named in the command lines of its keeper and sandboxes, and in its cgroups: what it left can be found."""
        self._keeper: _Keeper | None = None
        self._cgroups: CgroupRoot | None = None
        self._sandboxes: dict[str, _Sandbox] = {}
        self._pools: dict[tuple[str, Limits], list[_Sandbox]] = {}
        self._filling: dict[tuple[str, Limits], asyncio.Task[None]] = {}
        self._bases: dict[str, str] = {}
        self._snapshot_refs: dict[str, int] = {}
        self._pinned: dict[str, float] = {}
        self._chains: dict[str, list[str]] = {}
        """Each snapshot's layers, its own first: what a sandbox made from it stacks over its base."""
        self._whole: set[str] = set()
        """Snapshots of copied workspaces (`cow="copy"`): each holds every file, so nothing goes under it."""
        self._names = itertools.count()
        self._reaper: asyncio.Task[None] | None = None
        self._started = asyncio.Lock()
        self._closed = False

    # ---- lifecycle -----------------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether `close` ran (or the process's exit did): nothing more can be made with it."""
        return self._closed

    async def __aenter__(self) -> LocalProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the keeper (and the reaper); the first create does this too."""
        async with self._started:
            if self._keeper is not None:
                return
            if self._closed:
                raise SandboxError("this sandbox provider is closed")
            keeper = _Keeper.spawn(self.tag)  # from this (the loop's) thread: a parent-death signal follows the thread
            await asyncio.to_thread(keeper.ready)
            self._keeper = keeper
            self._cgroups = await asyncio.to_thread(CgroupRoot.make, self.tag) if self.use_cgroups else None
            self._reaper = asyncio.create_task(self._reap_forever())
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        """A provider its process never closed (a process-wide one) is closed as the process exits: the parent-death
        chain would end its sandboxes anyway, but their cgroups would stay until the next provider swept them."""
        keeper, cgroups = self._keeper, self._cgroups
        self._keeper, self._cgroups, self._closed = None, None, True
        if keeper is not None:
            keeper.stop()
        if cgroups is not None:
            cgroups.remove()

    async def close(self) -> None:
        """End every sandbox and the keeper: nothing of this provider is left (processes, mounts, cgroups)."""
        self._closed = True
        atexit.unregister(self._at_exit)
        for task in [self._reaper, *self._filling.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        boxes = [*self._sandboxes.values(), *(b for pool in self._pools.values() for b in pool)]
        await asyncio.gather(*(box.channel.aclose() for box in boxes))
        self._sandboxes.clear()
        self._pools.clear()
        if self._keeper is not None:
            await asyncio.to_thread(self._keeper.stop)  # the kernel ends every sandbox and frees every layer
            self._keeper = None
        if self._cgroups is not None:
            await asyncio.to_thread(self._cgroups.remove)

    @property
    def live(self) -> int:
        """Sandboxes handed out and not yet destroyed (the warm pools not counted)."""
        return len(self._sandboxes)

    @property
    def warm_count(self) -> int:
        return sum(len(pool) for pool in self._pools.values())

    @property
    def uses_cgroups(self) -> bool:
        return self._cgroups is not None

    def describe(self, sandbox: str) -> dict[str, Any]:
        """What a sandbox runs under: its walls, how its workspace was made, its limits and where they hold."""
        box = self._get(sandbox)
        return {
            "walls": box.walls,
            "cow": box.cow,
            "limits": box.limits,
            "cgroup": box.cgroup is not None,
            "snapshots": list(box.snapshots),
            "host_pid": box.host_pid,
        }

    # ---- create, fork, snapshot, destroy -------------------------------------------------------------------------

    async def create(
        self,
        base: Base,
        *,
        limits: Limits | None = None,
        snapshot: str | None = None,
        endpoints: tuple[Endpoint, ...] = (),
        holder: object | None = None,
    ) -> str:
        await self.start()
        limits = limits or self.default_limits
        if len(self._sandboxes) >= self.max_sandboxes:
            raise SandboxCapacity(f"this provider holds {self.max_sandboxes} sandboxes, its most (`max_sandboxes`)")
        layers = self._snapshot_layers(snapshot)
        box = await self._claimable(base, limits, endpoints)
        self._sandboxes[box.id] = box  # counted from here, so concurrent creates respect the limit
        try:
            await self._setup(box, layers)
        except BaseException:
            self._sandboxes.pop(box.id, None)
            await self._end(box)
            raise
        box.holder = holder
        return box.id

    async def fork(self, sandbox: str, n: int) -> list[str]:
        box = self._get(sandbox)
        room = self.max_sandboxes - len(self._sandboxes)
        if n < 1 or n > self.max_fork or n > room:
            raise ForkLimitExceeded(
                f"fork of {n} copies refused: at most {min(self.max_fork, room)} "
                f"(`max_fork` {self.max_fork}, room for {room} more sandboxes)"
            )
        snapshot = await self.snapshot(sandbox)
        try:
            return list(
                await asyncio.gather(
                    *(self.create(box.base, limits=box.limits, snapshot=snapshot, holder=box.holder) for _ in range(n))
                )
            )
        finally:
            await self.drop_snapshot(snapshot)

    async def snapshot(self, sandbox: str) -> str:
        box = self._touch(sandbox)
        keeper = self._require_keeper()
        name = f"snap{next(self._names)}"
        await keeper.call("snapshot", name=box.name, snapshot=name)
        snapshot_id = f"{self.prefix}/{name}"
        self._snapshot_refs[name] = 0
        self._pinned[name] = time.monotonic()
        if box.cow == "copy":  # the copy holds every file: it stands alone, on no base and no other layer
            self._whole.add(name)
            self._chains[name] = [name]
        else:  # only what this sandbox changed: it stacks on the layers the sandbox started from
            for parent in box.snapshots:
                self._snapshot_refs[parent] += 1
            self._chains[name] = [name, *box.snapshots]
        return snapshot_id

    async def drop_snapshot(self, snapshot: str) -> None:
        name = snapshot.rsplit("/", 1)[-1]
        if self._pinned.pop(name, None) is not None:
            await self._drop_if_unused(name)

    async def destroy(self, sandbox: str) -> None:
        box = self._sandboxes.pop(sandbox, None)
        if box is not None:
            await self._end(box)
            await self._release(box.snapshots)

    # ---- commands and files --------------------------------------------------------------------------------------

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
        box = self._touch(sandbox)
        deadline = timeout_s if timeout_s is not None else box.limits.wall_s
        reply = await self._call(
            box,
            "exec",
            deadline + _REPLY_GRACE_S,
            argv=_argv(command),
            timeout_s=deadline,
            stdin=base64.b64encode(stdin).decode(),
            env=env or {},
            cwd=cwd,
        )
        box.last_used = time.monotonic()
        return _result(reply)

    async def start_process(
        self,
        sandbox: str,
        command: str | list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes = b"",
    ) -> int:
        box = self._touch(sandbox)
        reply = await self._call(
            box, "start", _REPLY_GRACE_S, argv=_argv(command), env=env or {}, cwd=cwd,
            stdin=base64.b64encode(stdin).decode(),
        )  # fmt: skip
        return int(reply["pid"])

    async def wait_process(self, sandbox: str, pid: int, *, timeout_s: float | None = None) -> ProcessState:
        box = self._touch(sandbox)
        grace = None if timeout_s is None else timeout_s + _REPLY_GRACE_S
        reply = await self._call(box, "wait", grace, pid=pid, timeout_s=timeout_s)
        box.last_used = time.monotonic()
        if reply.get("running"):
            return ProcessState(pid=pid, running=True)
        return ProcessState(pid=pid, running=False, result=_result(reply))

    async def kill_process(self, sandbox: str, pid: int) -> None:
        await self._call(self._touch(sandbox), "kill", _REPLY_GRACE_S, pid=pid)

    async def read_file(self, sandbox: str, path: str) -> bytes:
        reply = await self._call(self._touch(sandbox), "read", _REPLY_GRACE_S, path=path)
        return base64.b64decode(reply["data"])

    async def write_file(
        self, sandbox: str, path: str, data: bytes, *, mode: int = 0o644, make_dirs: bool = False
    ) -> None:
        data64 = base64.b64encode(data).decode()
        box = self._touch(sandbox)
        await self._call(box, "write", _REPLY_GRACE_S, path=path, data=data64, mode=mode, make_dirs=make_dirs)

    async def kill_all(self, sandbox: str) -> None:
        await self._call(self._touch(sandbox), "kill_all", _REPLY_GRACE_S)

    async def list_files(self, sandbox: str, path: str = ".") -> list[FileEntry]:
        reply = await self._call(self._touch(sandbox), "list", _REPLY_GRACE_S, path=path)
        return [FileEntry(**entry) for entry in reply["entries"]]

    async def usage(self, sandbox: str) -> dict[str, int]:
        """Disk in use, files, commands running; memory and processes where a cgroup counts them."""
        box = self._touch(sandbox)
        found = dict(await self._call(box, "usage", _REPLY_GRACE_S))
        if box.cgroup is not None:
            found |= await asyncio.to_thread(box.cgroup.usage)
        return found

    # ---- internals: pools, spawning, setup -----------------------------------------------------------------------

    def _snapshot_layers(self, snapshot: str | None) -> list[str]:
        if snapshot is None:
            return []
        name = snapshot.rsplit("/", 1)[-1]
        chain = self._chains.get(name)
        if not snapshot.startswith(self.prefix + "/") or chain is None or name not in self._snapshot_refs:
            raise SandboxGone(f"no snapshot `{snapshot}` here (dropped, or made by another replica)")
        for layer in chain:
            self._snapshot_refs[layer] += 1
        return list(chain)

    async def _release(self, layers: list[str]) -> None:
        """A sandbox that stood on these snapshot layers is gone: each goes when nothing else holds it."""
        for layer in layers:
            if layer in self._snapshot_refs:
                self._snapshot_refs[layer] -= 1
                await self._drop_if_unused(layer)

    async def _drop_if_unused(self, layer: str) -> None:
        """Drop a snapshot layer no sandbox, no later snapshot and no pin holds; then the layers it held."""
        if self._snapshot_refs.get(layer, 0) > 0 or layer in self._pinned or layer not in self._chains:
            return
        del self._snapshot_refs[layer]
        self._whole.discard(layer)
        parents = self._chains.pop(layer)[1:]
        if self._keeper is not None:
            await self._keeper.call("drop", snapshot=layer)
        await self._release(parents)

    async def _claimable(self, base: Base, limits: Limits, endpoints: tuple[Endpoint, ...]) -> _Sandbox:
        """A spawned, unclaimed sandbox: from the warm pool when one is ready, else a fresh one."""
        if endpoints:
            return await self._spawn(base, limits, endpoints)  # a gateway's socket is bound at spawn: never pooled
        key = (base.key, limits)
        pool = self._pools.setdefault(key, [])
        box = pool.pop() if pool else None
        self._refill(base, limits)
        if box is not None and not box.channel.closed:
            return box
        if box is not None:
            await self._end(box)
        return await self._spawn(base, limits, ())

    def _refill(self, base: Base, limits: Limits) -> None:
        key = (base.key, limits)
        if self.warm <= 0 or self._closed or (key in self._filling and not self._filling[key].done()):
            return

        async def fill() -> None:
            pool = self._pools.setdefault(key, [])
            while len(pool) < self.warm and not self._closed:
                try:
                    pool.append(await self._spawn(base, limits, ()))
                except SandboxError as e:
                    log.warning("warm pool for base %s: %s", base.name or base.key, e)
                    return

        self._filling[key] = asyncio.create_task(fill())

    async def _spawn(self, base: Base, limits: Limits, endpoints: tuple[Endpoint, ...]) -> _Sandbox:
        keeper = self._require_keeper()
        base_path = await self._base_path(base)
        name = f"s{next(self._names)}"
        argv = _sandbox_argv(base, base_path, endpoints, self.tag)
        reply, fds = await keeper.call_with_fds(
            "spawn", name=name, argv=argv, disk_bytes=limits.disk_mb << 20, max_files=limits.max_files
        )
        channel = await _Channel.open(fds[0])
        cgroup = None
        try:
            if self._cgroups is not None:
                cgroup = await asyncio.to_thread(
                    self._cgroups.make_child,
                    name,
                    memory_bytes=limits.memory_mb << 20,
                    max_processes=limits.max_processes,
                    cpus=limits.cpus,
                )
                await asyncio.to_thread(cgroup.add, int(reply["child_pid"]))  # before any command is born
        except OSError as e:
            await channel.aclose()
            await keeper.call("reap", name=name)
            if cgroup is not None:
                await asyncio.to_thread(cgroup.remove)
            raise SandboxError(f"cannot put the sandbox in its cgroup: {e}") from e
        return _Sandbox(
            id=f"{self.prefix}/{uuid.uuid4().hex}",
            name=name,
            base=base,
            limits=limits,
            endpoints=endpoints,
            channel=channel,
            cgroup=cgroup,
            host_pid=int(reply["child_pid"]),
        )

    async def _setup(self, box: _Sandbox, snapshots: list[str]) -> None:
        box.snapshots = snapshots
        base_lower = f"{_LAYERS}/bases/{box.base.key}" if box.base.files else "/.base"
        limits = box.limits
        rlimits: dict[str, int] = {"cpu_s": limits.cpu_s, "file_size_bytes": limits.disk_mb << 20}
        if box.cgroup is None:  # no cgroup: per-process limits, and processes per user namespace
            rlimits |= {"address_space_bytes": limits.memory_mb << 20, "max_processes": limits.max_processes}
        else:
            rlimits |= {"max_processes": limits.max_processes}
        reply = await self._call(
            box,
            "setup",
            _REPLY_GRACE_S * 3,
            lowers=[f"{_LAYERS}/snaps/{s}" for s in snapshots]
            + ([] if set(snapshots) & self._whole else [base_lower]),
            upper=f"{_LAYERS}/{box.name}/upper",
            work=f"{_LAYERS}/{box.name}/work",
            tmp=f"{_LAYERS}/{box.name}/tmp",
            cow=self.cow,
            network=limits.network,
            forward={str(e.port): e.path for e in box.endpoints if e.port is not None},
            limits=rlimits | {"output_bytes": limits.output_bytes},
            env=_command_env(box.base),
        )
        box.walls = list(reply["walls"])
        box.cow = str(reply["cow"])
        box.created = box.last_used = time.monotonic()

    async def _base_path(self, base: Base) -> str:
        if base.folder is not None:
            if not os.path.isdir(base.folder):
                raise BaseNotFound(f"the base folder `{base.folder}` does not exist")
            return base.folder
        for entry in base.files:
            if entry.copy is not None and not os.path.exists(entry.copy):
                raise BaseNotFound(f"the base's `{entry.dest}` comes from `{entry.copy}`, which does not exist")
        if base.key not in self._bases:
            entries = [{k: v for k, v in vars(e).items() if v is not None} for e in base.files]
            reply = await self._require_keeper().call("base", base=base.key, entries=entries)
            self._bases[base.key] = reply["path"]
        return self._bases[base.key]

    async def _call(self, box: _Sandbox, op: str, reply_within: float | None, **fields: Any) -> dict[str, Any]:
        try:
            return await box.channel.request(op, reply_within, **fields)
        except _ChannelClosed as e:
            live = self._sandboxes.pop(box.id, None)
            if live is not None:
                await self._end(box)
                await self._release(box.snapshots)
            raise SandboxGone(f"sandbox `{box.id}` ended under `{op}` ({e})") from None

    async def _end(self, box: _Sandbox) -> None:
        await box.channel.aclose()
        keeper = self._keeper
        if keeper is not None:
            with contextlib.suppress(SandboxError, OSError):
                await keeper.call("reap", name=box.name)
        if box.cgroup is not None:
            await asyncio.to_thread(box.cgroup.remove)

    def _get(self, sandbox: str) -> _Sandbox:
        box = self._sandboxes.get(sandbox)
        if box is None:
            raise SandboxGone(f"no live sandbox `{sandbox}` here (destroyed, expired, or held by another replica)")
        return box

    def _touch(self, sandbox: str) -> _Sandbox:
        box = self._get(sandbox)
        box.last_used = time.monotonic()
        return box

    def _require_keeper(self) -> _Keeper:
        if self._keeper is None:
            raise SandboxError("the sandbox provider is not started (or closed)")
        return self._keeper

    # ---- the reaper ----------------------------------------------------------------------------------------------

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_every_s)
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the reaper must outlive any one sandbox's trouble
                log.exception("sandbox reaper")

    async def sweep(self) -> list[str]:
        """Destroy every sandbox idle past its TTL, past its lifetime, whose supervisor ended, or whose holder is
        gone; drop snapshots pinned for longer than the default TTL. Returns the ids destroyed."""
        now = time.monotonic()
        doomed = [
            box.id
            for box in list(self._sandboxes.values())
            if box.channel.closed
            or now - box.last_used > box.limits.ttl_s
            or now - box.created > box.limits.max_lifetime_s
        ]
        if self.holder_alive is not None:  # holders are hashable: one check per holder, however many it holds
            holders = list({box.holder for box in self._sandboxes.values() if box.holder is not None})
            alive = dict(zip(holders, await asyncio.gather(*(self._alive(h) for h in holders)), strict=True))
            doomed += [b.id for b in self._sandboxes.values() if not alive.get(b.holder, True)]
        for sandbox in dict.fromkeys(doomed):
            await self.destroy(sandbox)
        for name, pinned in list(self._pinned.items()):
            if now - pinned > self.default_limits.ttl_s:
                await self.drop_snapshot(f"{self.prefix}/{name}")
        for pool in self._pools.values():  # a warm sandbox whose supervisor ended is replaced
            for box in [b for b in pool if b.channel.closed]:
                pool.remove(box)
                await self._end(box)
        return list(dict.fromkeys(doomed))

    async def _alive(self, holder: object) -> bool:
        assert self.holder_alive is not None
        try:
            return await self.holder_alive(holder)
        except Exception:  # noqa: BLE001 - a check that fails says nothing: keep the sandbox (its TTL still holds)
            return True


# ---- the keeper, from this side ------------------------------------------------------------------------------------


class _Keeper:
    """The keeper process and its control socket (blocking; the provider calls it from worker threads)."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.buffer = b""

    @classmethod
    def spawn(cls, tag: str) -> _Keeper:
        """Start the keeper; `ready` waits for it to answer."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [
            *host.identity(), host.bwrap(),
            "--unshare-user", "--uid", "0", "--gid", "0", "--cap-add", "ALL",
            "--dev-bind", "/", "/", "--tmpfs", "/dev/shm", "--die-with-parent",
            "--", host.sandbox_python(), "-I", "-S", "-B", "-c", _source("_keeper.py"), str(theirs.fileno()),
            f"gs-sandbox-tag={tag}",
        ]  # fmt: skip
        try:
            proc = subprocess.Popen(
                command,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=host.minimal_env("/"),
                cwd="/",
            )
        finally:
            theirs.close()
        return cls(proc, ours)

    def ready(self) -> None:
        try:
            self.request("ping", 30.0)
        except SandboxError as e:
            self.stop()
            stderr = self.proc.stderr.read().decode(errors="replace")[-1000:] if self.proc.stderr else ""
            raise IsolationUnavailable(
                f"cannot start a sandbox keeper (bubblewrap needs user namespaces): {e}; {stderr.strip()}"
            ) from None

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        reply, fds = await self.call_with_fds(op, **fields)
        for fd in fds:
            os.close(fd)
        return reply

    async def call_with_fds(self, op: str, **fields: Any) -> tuple[dict[str, Any], list[int]]:
        return await asyncio.to_thread(self.request_fds, op, 120.0, fields)

    def request(self, op: str, timeout_s: float, **fields: Any) -> dict[str, Any]:
        reply, fds = self.request_fds(op, timeout_s, fields)
        for fd in fds:
            os.close(fd)
        return reply

    def request_fds(self, op: str, timeout_s: float, fields: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        with self.lock:
            rid = next(self.ids)
            self.sock.settimeout(timeout_s)
            try:
                self.sock.sendall(json.dumps({"id": rid, "op": op, **fields}).encode() + b"\n")
                fds: list[int] = []
                while b"\n" not in self.buffer:
                    data, received, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
                    if not data:
                        raise SandboxError("the sandbox keeper ended")
                    self.buffer += data
                    fds += received
            except OSError as e:
                raise SandboxError(f"the sandbox keeper did not answer `{op}`: {e}") from e
            line, _, self.buffer = self.buffer.partition(b"\n")
        message = json.loads(line)
        if "error" in message:
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"keeper: {message['error']['type']}: {message['error']['message']}")
        return message["ok"], fds

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


# ---- one sandbox's channel -----------------------------------------------------------------------------------------


class _ChannelClosed(Exception):
    pass


class _Channel:
    """The provider's side of a supervisor's socket: requests with ids, replies matched as they come."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count()
        self.closed = False
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, fd: int) -> _Channel:
        sock = socket.socket(fileno=fd)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 26)
        return cls(reader, writer)

    async def request(self, op: str, reply_within: float | None, **fields: Any) -> dict[str, Any]:
        if self.closed:
            raise _ChannelClosed("its supervisor is gone")
        rid = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = future
        try:
            self.writer.write(json.dumps({"id": rid, "op": op, **fields}).encode() + b"\n")
            await self.writer.drain()
            message = await asyncio.wait_for(future, reply_within)
        except (ConnectionError, OSError) as e:
            raise _ChannelClosed(str(e)) from e
        except TimeoutError:
            self.close()  # a supervisor that does not answer in time is broken: end the sandbox
            raise _ChannelClosed(f"its supervisor did not answer within {reply_within:g} s") from None
        finally:
            self.pending.pop(rid, None)
        if "error" in message:
            raise error_named(message["error"]["type"], message["error"]["message"])
        return message["ok"]

    async def _read(self) -> None:
        try:
            while line := await self.reader.readline():
                message = json.loads(line)
                future = self.pending.get(message.get("id"))
                if future is not None and not future.done():
                    future.set_result(message)
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            self.closed = True
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(_ChannelClosed("its supervisor ended"))

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.writer.close()
        self.task.cancel()

    async def aclose(self) -> None:
        """Close, and wait until the socket is closed (a loop that ends first would leave it open)."""
        self.close()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self.writer.wait_closed()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


# ---- the command lines ---------------------------------------------------------------------------------------------


def _sandbox_argv(base: Base, base_path: str, endpoints: tuple[Endpoint, ...], tag: str) -> list[str]:
    """bwrap's arguments for one sandbox (run by the keeper, which fills in `{channel}` and `{info}`)."""
    argv = [
        host.bwrap(),
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--uid", "0", "--gid", "0", "--hostname", "sandbox",
        "--die-with-parent", "--as-pid-1", "--new-session", "--cap-add", "CAP_SYS_ADMIN",
        "--info-fd", "{info}",
        *host.view(python="stdlib"),
    ]  # fmt: skip
    for source, dest in base.binds:
        if not os.path.exists(source):
            raise BaseNotFound(f"the base's bind `{dest}` comes from `{source}`, which does not exist")
        argv += ["--ro-bind", source, dest]
    for endpoint in endpoints:
        if not os.path.exists(endpoint.socket):
            raise SandboxError(f"the endpoint socket `{endpoint.socket}` does not exist")
        argv += ["--bind", endpoint.socket, endpoint.path]
    if base.folder is not None:
        argv += ["--ro-bind", base_path, "/.base"]
    argv += [
        "--bind", "/dev/shm", _LAYERS,  # the keeper's layers: unmounted by the supervisor before anything runs
        "--proc", "/proc", "--dev", "/dev", "--dir", "/workspace", "--dir", "/tmp", "--chdir", "/",
        "--", host.sandbox_python(), "-I", "-S", "-B", "-c", _source("_supervisor.py"), "{channel}",
        _source("_confine.py"), f"gs-sandbox-tag={tag}",
    ]  # fmt: skip
    return argv


def _command_env(base: Base) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/workspace",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "USER": "root",
        "TERM": "dumb",
    }
    return env | dict(base.env)


def _argv(command: str | list[str]) -> list[str]:
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    if not command:
        raise ValueError("an empty command")
    return [str(part) for part in command]


def _result(reply: dict[str, Any]) -> ExecResult:
    return ExecResult(
        exit_code=reply["exit_code"],
        signal=reply["signal"],
        stdout=base64.b64decode(reply["stdout"]).decode(errors="replace"),
        stderr=base64.b64decode(reply["stderr"]).decode(errors="replace"),
        stdout_truncated=reply["stdout_truncated"],
        stderr_truncated=reply["stderr_truncated"],
        timed_out=reply["timed_out"],
        wall_s=reply["wall_s"],
    )
