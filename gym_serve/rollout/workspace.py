"""Where a harness program runs: the interface a harness episode uses, whatever confines the program.

A harness episode (`gym_serve.rollout.harness`) opens one workspace per rollout, writes the task file, runs
the program there once, reads back what it left, and closes it. Two kinds of workspace implement this:

- a confined subprocess on the Agent replica's machine (`gym_serve.rollout.confined`: namespaces or a
  process group, rlimits, a private folder);
- a sandbox of the application's Sandbox tier (`gym_serve.calls.sandbox_workspaces`: the overlay workspace,
  kernel walls and cgroup limits of `gym_serve.sandbox`, created from the harness's base).

Either reaches its gateway session at `gateway_url`, and either kills everything the program started before
`exec` returns or, at the latest, at `close`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gym_serve.rollout.gateway_session import SessionAddress

__all__ = ["ExecResult", "Workspace", "Workspaces"]


@dataclass
class ExecResult:
    """How a program ended, and what it wrote (each stream cut to the cap, its last bytes kept)."""

    exit_status: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool


class Workspace(Protocol):
    """One rollout's workspace, as its harness program sees it."""

    @property
    def path(self) -> Path:
        """The workspace folder as the program sees it (its working folder and `HOME`)."""
        ...

    @property
    def isolation(self) -> str:
        """What confines the program: `namespaces`, `process` or `sandbox` (reported in the harness's `info`)."""
        ...

    @property
    def gateway_url(self) -> str:
        """The gateway's root URL as a program here reaches it."""
        ...

    async def write_text(self, name: str, text: str) -> None:
        """Write `text` to the file `name` of the workspace (the task file)."""
        ...

    async def exec(
        self, argv: list[str], env: dict[str, str], *, stdin: bytes | None, timeout_s: float, max_output_bytes: int
    ) -> ExecResult:
        """Run `argv` here with `env` over the workspace's own (`PATH`, `HOME`, `TMPDIR`); kill it and all it
        started at `timeout_s`."""
        ...

    async def snapshot(self, max_files: int, max_bytes: int) -> dict[str, str]:
        """The workspace's regular files as text (links never followed), up to the caps."""
        ...

    async def close(self) -> None:
        """End everything still running here and remove the workspace."""
        ...


class Workspaces(Protocol):
    """Opens a workspace for each rollout, whose programs reach the rollout's gateway session."""

    async def open(self, address: SessionAddress) -> Workspace: ...
