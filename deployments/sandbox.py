"""The Sandbox tier: workspaces for rollouts (`gym_serve.sandbox.LocalProvider`) behind a handle.

Each replica holds its own sandboxes (its keeper's namespaces on its machine); a sandbox's id names
the replica, and callers send every later call of that sandbox there (`gym_serve.calls.sandboxes`,
through the `SessionRouter`). The tier autoscales on live sandboxes (`live_sandboxes_policy`): a
replica that is stopped takes its sandboxes with it (their rollouts fail as `session_lost` and are
retried), so the config's `downscale_delay_s` is long by default.

The reaper of each replica removes a sandbox idle past its TTL, past its lifetime, or whose holder
(the Agent replica running its rollout) is gone; a replica that dies takes every sandbox of it with it.
"""

from __future__ import annotations

from typing import Any

from ray import serve

from gym_serve.calls.autoscaling import LIVE_SANDBOXES
from gym_serve.calls.sandboxes import actor_alive
from gym_serve.sandbox import Base, Endpoint, ExecResult, FileEntry, Limits, LocalProvider, ProcessState
from gym_serve.serving.config import SandboxArgs

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 1024, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Sandbox")
class SandboxDeployment:
    """One replica's sandboxes; every method is `LocalProvider`'s, over the sandbox's id."""

    def __init__(self, args: SandboxArgs) -> None:
        replica = serve.get_replica_context().replica_id.unique_id
        self.provider = LocalProvider(
            prefix=replica,
            warm=args.warm,
            max_sandboxes=args.max_sandboxes,
            max_fork=args.max_fork,
            default_limits=args.sandbox_limits(),
            cow=args.cow,
            holder_alive=actor_alive,
        )

    async def create(
        self,
        base: Base,
        *,
        limits: Limits | None = None,
        snapshot: str | None = None,
        endpoints: tuple[Endpoint, ...] = (),
        holder: object | None = None,
    ) -> str:
        return await self.provider.create(base, limits=limits, snapshot=snapshot, endpoints=endpoints, holder=holder)

    async def exec(self, sandbox: str, command: str | list[str], **kwargs: Any) -> ExecResult:
        return await self.provider.exec(sandbox, command, **kwargs)

    async def start_process(self, sandbox: str, command: str | list[str], **kwargs: Any) -> int:
        return await self.provider.start_process(sandbox, command, **kwargs)

    async def wait_process(self, sandbox: str, pid: int, *, timeout_s: float | None = None) -> ProcessState:
        return await self.provider.wait_process(sandbox, pid, timeout_s=timeout_s)

    async def kill_process(self, sandbox: str, pid: int) -> None:
        await self.provider.kill_process(sandbox, pid)

    async def read_file(self, sandbox: str, path: str) -> bytes:
        return await self.provider.read_file(sandbox, path)

    async def write_file(
        self, sandbox: str, path: str, data: bytes, *, mode: int = 0o644, make_dirs: bool = False
    ) -> None:
        await self.provider.write_file(sandbox, path, data, mode=mode, make_dirs=make_dirs)

    async def kill_all(self, sandbox: str) -> None:
        await self.provider.kill_all(sandbox)

    async def list_files(self, sandbox: str, path: str = ".") -> list[FileEntry]:
        return await self.provider.list_files(sandbox, path)

    async def snapshot(self, sandbox: str) -> str:
        return await self.provider.snapshot(sandbox)

    async def drop_snapshot(self, snapshot: str) -> None:
        await self.provider.drop_snapshot(snapshot)

    async def fork(self, sandbox: str, n: int) -> list[str]:
        return await self.provider.fork(sandbox, n)

    async def destroy(self, sandbox: str) -> None:
        await self.provider.destroy(sandbox)

    async def stats(self) -> dict[str, Any]:
        """What this replica holds: live and warm sandboxes, whether cgroups bound them, its process id, and its
        provider's tag (in the command line of every process of its sandboxes)."""
        import os

        return {
            "live": self.provider.live,
            "warm": self.provider.warm_count,
            "cgroups": self.provider.uses_cgroups,
            "pid": os.getpid(),
            "tag": self.provider.tag,
        }

    def record_autoscaling_stats(self) -> dict[str, float]:
        return {LIVE_SANDBOXES: float(self.provider.live)}

    async def __del__(self) -> None:
        await self.provider.close()
