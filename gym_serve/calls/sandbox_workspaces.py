"""Harness programs in sandboxes of the Sandbox tier: the `gym_serve.rollout.workspace` interface over its handle.

With `isolation: sandbox` a harness agent opens each rollout's workspace as a sandbox of its application's
Sandbox tier (`gym_serve.sandbox`: user, mount, PID and network namespaces, an overlay `/workspace`,
seccomp and Landlock walls, cgroup limits as root), held by the Agent replica (the tier's reaper removes it
if that replica dies). The gateway replica's Unix socket is bound into it and relayed on its own loopback
(`127.0.0.1:41111`), so the program reaches its session and nothing else: no other port of the machine or
the cluster, no other address. `exec` runs the program to its end or its deadline; then everything it left
running is ended (`kill_all`) before its files are read, and `close` destroys the sandbox.

The Sandbox replica must be on the Gateway replica's node (its socket is a host file): one node, or both
tiers pinned to the same nodes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gym_serve.calls.sandboxes import SandboxTierClient, current_holder
from gym_serve.environment.workspace import workspace_errors
from gym_serve.errors import HarnessError
from gym_serve.rollout.confined import FORWARD_PORT
from gym_serve.rollout.gateway_session import SessionAddress
from gym_serve.rollout.harness_config import HarnessSandbox
from gym_serve.rollout.workspace import ExecResult
from gym_serve.sandbox import Base, CommandNotFound, Endpoint, Limits, SandboxError

__all__ = ["SandboxWorkspace", "SandboxWorkspaces"]

INSIDE = Path("/workspace")


class SandboxWorkspace:
    """One rollout's sandbox; see the module docstring."""

    isolation = "sandbox"
    path = INSIDE
    gateway_url = f"http://127.0.0.1:{FORWARD_PORT}"

    def __init__(self, sandboxes: SandboxTierClient, sandbox: str) -> None:
        self.sandboxes = sandboxes
        self.sandbox = sandbox

    async def write_text(self, name: str, text: str) -> None:
        with workspace_errors("writing the task file"):
            await self.sandboxes.write_file(self.sandbox, name, text.encode())

    async def exec(
        self, argv: list[str], env: dict[str, str], *, stdin: bytes | None, timeout_s: float, max_output_bytes: int
    ) -> ExecResult:
        """Run `argv` in `/workspace` with `env` over the sandbox's own; then end all it left running.

        Its output is capped by the sandbox's `output_bytes` (the tier's limits), not `max_output_bytes`."""
        try:
            with workspace_errors(f"running `{argv[0]}` in its sandbox"):
                done = await self.sandboxes.exec(
                    self.sandbox, argv, timeout_s=timeout_s, stdin=stdin or b"", env=env, cwd=str(INSIDE)
                )
                await self.sandboxes.kill_all(self.sandbox)
        except CommandNotFound as e:
            raise HarnessError(
                f"the harness program is not in its sandbox: {e} (bind it in with `sandbox.binds`)"
            ) from e
        status = done.exit_code if done.exit_code is not None else (-done.signal if done.signal else None)
        return ExecResult(
            exit_status=None if done.timed_out else status,
            stdout=done.stdout,
            stderr=done.stderr,
            truncated=done.truncated,
            timed_out=done.timed_out,
        )

    async def snapshot(self, max_files: int, max_bytes: int) -> dict[str, str]:
        """The sandbox's regular files under `/workspace`, breadth-first in name order, as text."""
        files: dict[str, str] = {}
        total = 0
        folders = ["."]
        with workspace_errors("reading the workspace"):
            while folders:
                folder = folders.pop(0)
                for entry in sorted(await self.sandboxes.list_files(self.sandbox, folder), key=lambda e: e.name):
                    name = entry.name if folder == "." else f"{folder}/{entry.name}"
                    if entry.kind == "dir":
                        folders.append(name)
                    elif entry.kind == "file":
                        if len(files) >= max_files or total + entry.size > max_bytes:
                            return files
                        data = await self.sandboxes.read_file(self.sandbox, name)
                        total += len(data)
                        files[name] = data.decode(errors="replace")
        return files

    async def close(self) -> None:
        await self.sandboxes.destroy(self.sandbox)


class SandboxWorkspaces:
    """Opens each rollout's workspace in the Sandbox tier, from the harness's `sandbox:` options."""

    def __init__(self, sandboxes: SandboxTierClient, options: HarnessSandbox) -> None:
        self.sandboxes = sandboxes
        self.limits = Limits(**options.limits) if options.limits else None
        binds = tuple((host, inside) for inside, host in sorted(options.binds.items()))
        self._empty = None if options.base else _empty_folder()  # kept: the folder lives as long as this does
        folder = self._empty.name if self._empty else options.base
        self.base = Base(folder=folder, binds=binds, name="harness")
        self.holder = current_holder()

    async def open(self, address: SessionAddress) -> SandboxWorkspace:
        if address.socket is None:
            raise HarnessError("the gateway replica has no Unix socket to bind into a sandbox")
        endpoint = Endpoint(socket=address.socket, port=FORWARD_PORT)
        try:
            with workspace_errors("creating the harness's sandbox"):
                sandbox = await self.sandboxes.create(
                    self.base, limits=self.limits, endpoints=(endpoint,), holder=self.holder
                )
        except SandboxError as e:  # a bad input of the harness's config (a bind that is not there)
            raise HarnessError(f"cannot create the harness's sandbox: {e}") from e
        return SandboxWorkspace(self.sandboxes, sandbox)

    def close(self) -> None:
        """Remove the empty base folder this made, if it made one (the replica's end: Serve kills its process
        after `__del__`, so no finalizer would)."""
        if self._empty:
            self._empty.cleanup()


def _empty_folder() -> tempfile.TemporaryDirectory[str]:
    """The base of a harness sandbox that names none: an empty folder of this replica's own (made here, so no
    other user of the machine can have put files in it), which the sandbox's user can read."""
    folder = tempfile.TemporaryDirectory(prefix="gym-serve-empty-base-", ignore_cleanup_errors=True)
    os.chmod(folder.name, 0o755)
    return folder
