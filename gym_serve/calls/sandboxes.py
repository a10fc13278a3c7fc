"""The Sandbox tier through its handle: a `SandboxProvider` whose every call reaches the replica holding the sandbox.

A sandbox's id starts with the unique id of the Sandbox replica that made it
(`<replica>/<hex>`), and so does a snapshot's; each call is sent under that
replica's routing key (`gym_serve.calls.routing.replica_key`), so the
`SessionRouter` delivers it there and nowhere else. A call whose replica is
gone, or that dies under it, raises `SandboxGone` (the environment makes it
`session_lost`: the rollout is retried, with a new sandbox).

Creates go to any replica (Serve's power-of-two choice) unless they start
from a snapshot, which only its own replica holds.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.serve.handle import DeploymentHandle

from gym_serve.calls.routing import replica_key
from gym_serve.errors import FailureKind, failure_kind
from gym_serve.sandbox import (
    Base,
    Endpoint,
    ExecResult,
    FileEntry,
    Limits,
    ProcessState,
    SandboxError,
    SandboxGone,
)

__all__ = ["Holder", "SandboxTierClient", "actor_alive", "current_holder"]


class Holder:
    """An actor that holds sandboxes (the Agent replica running their rollouts), named by its actor id."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.actor_id = actor._actor_id.hex()

    def __hash__(self) -> int:
        return hash(self.actor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Holder) and other.actor_id == self.actor_id

    def __repr__(self) -> str:
        return f"Holder({self.actor_id})"


def current_holder() -> Holder | None:
    """This actor as a holder (an Agent replica's own), or None outside an actor."""
    try:
        actor = ray.get_runtime_context().current_actor
    except RuntimeError:
        return None
    return Holder(actor)


async def actor_alive(holder: object) -> bool:
    """Whether a holder's actor still answers; the Sandbox tier's reaper asks on every sweep."""
    if not isinstance(holder, Holder):
        return True
    try:
        await holder.actor.__ray_ready__.remote()
    except Exception as e:
        if failure_kind(e) is FailureKind.KILL_SHAPED:
            return False
        raise
    return True


class SandboxTierClient:
    """`SandboxProvider` over the Sandbox deployment's handle (see the module docstring)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle
        self._pinned: dict[str, DeploymentHandle] = {}

    def _to(self, name: str) -> DeploymentHandle:
        replica = name.split("/", 1)[0]
        handle = self._pinned.get(replica)
        if handle is None:
            handle = self._pinned[replica] = self._handle.options(session_id=replica_key(replica))
        return handle

    async def _call(self, name: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        handle = self._to(name) if name is not None else self._handle
        try:
            return await getattr(handle, method).remote(*args, **kwargs)
        except Exception as e:
            if failure_kind(e) is FailureKind.KILL_SHAPED:
                raise SandboxGone(f"the Sandbox replica holding `{name}` died under `{method}`: {e}") from e
            cause = getattr(e, "cause", None)
            if isinstance(cause, SandboxError):  # the provider's own error, without Ray's wrapper and traceback text
                raise cause from None
            raise

    async def create(
        self,
        base: Base,
        *,
        limits: Limits | None = None,
        snapshot: str | None = None,
        endpoints: tuple[Endpoint, ...] = (),
        holder: object | None = None,
    ) -> str:
        kwargs = {"limits": limits, "snapshot": snapshot, "endpoints": endpoints, "holder": holder}
        return str(await self._call(snapshot, "create", base, **kwargs))

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
        kwargs = {"timeout_s": timeout_s, "stdin": stdin, "env": env, "cwd": cwd}
        result: ExecResult = await self._call(sandbox, "exec", sandbox, command, **kwargs)
        return result

    async def start_process(
        self,
        sandbox: str,
        command: str | list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes = b"",
    ) -> int:
        return int(await self._call(sandbox, "start_process", sandbox, command, env=env, cwd=cwd, stdin=stdin))

    async def wait_process(self, sandbox: str, pid: int, *, timeout_s: float | None = None) -> ProcessState:
        state: ProcessState = await self._call(sandbox, "wait_process", sandbox, pid, timeout_s=timeout_s)
        return state

    async def kill_process(self, sandbox: str, pid: int) -> None:
        await self._call(sandbox, "kill_process", sandbox, pid)

    async def read_file(self, sandbox: str, path: str) -> bytes:
        return bytes(await self._call(sandbox, "read_file", sandbox, path))

    async def write_file(
        self, sandbox: str, path: str, data: bytes, *, mode: int = 0o644, make_dirs: bool = False
    ) -> None:
        await self._call(sandbox, "write_file", sandbox, path, data, mode=mode, make_dirs=make_dirs)

    async def kill_all(self, sandbox: str) -> None:
        await self._call(sandbox, "kill_all", sandbox)

    async def list_files(self, sandbox: str, path: str = ".") -> list[FileEntry]:
        entries: list[FileEntry] = await self._call(sandbox, "list_files", sandbox, path)
        return entries

    async def snapshot(self, sandbox: str) -> str:
        return str(await self._call(sandbox, "snapshot", sandbox))

    async def drop_snapshot(self, snapshot: str) -> None:
        await self._call(snapshot, "drop_snapshot", snapshot)

    async def fork(self, sandbox: str, n: int) -> list[str]:
        return list(await self._call(sandbox, "fork", sandbox, n))

    async def destroy(self, sandbox: str) -> None:
        try:
            await self._call(sandbox, "destroy", sandbox)
        except SandboxGone:
            pass  # its replica is gone, and every sandbox of it
