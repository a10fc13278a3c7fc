"""Environments whose rollouts work in a sandbox: `bash` and a file editor bound to the rollout's workspace.

An environment that subclasses `WorkspaceEnvironment` keeps one sandbox per rollout: its `State`
(a `Workspace`, or a subclass) holds the sandbox's id, `reset` makes it (`open_workspace`), and its
tools and `verify` act on it. Two tools come with it, typed like every `@tool`:

- `bash`: a command run in the workspace (capped output, a deadline, the exit status).
- `str_replace_editor`: SWE-agent's file viewer and editor (`view` with line numbers, `create`,
  `str_replace`, `insert`, `undo_edit`).

Where the sandboxes live is not the environment's business: `sandboxes` is a `SandboxProvider`,
the Sandbox tier (`gym_serve.calls.sandboxes`) when the deployment gives one, else a
`LocalProvider` in this process. A sandbox's failures become the rollout's failure kinds here
(`workspace_errors`): a sandbox that is gone (its replica died, its TTL ran out) is
`session_lost`, so the rollout is retried from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Iterator
from typing import ClassVar, Literal, TypeVar

from pydantic import BaseModel, Field

from gym_serve.environment.core import Environment, Task
from gym_serve.environment.tools import tool, turn_time_left
from gym_serve.errors import EnvError, FailureKind, RolloutError, SessionLostError
from gym_serve.sandbox import (
    Base,
    BaseNotFound,
    ExecResult,
    ForkLimitExceeded,
    IsolationUnavailable,
    Limits,
    LocalProvider,
    SandboxCapacity,
    SandboxGone,
    SandboxProvider,
)

__all__ = [
    "HOLDER",
    "Edit",
    "Workspace",
    "WorkspaceEnvironment",
    "format_exec",
    "held_by",
    "local_provider",
    "workspace_errors",
]

HOLDER: contextvars.ContextVar[object | None] = contextvars.ContextVar("gym_serve_sandbox_holder", default=None)
"""Who holds the sandboxes made in this context: the Agent replica running the rollout (set by the Environment
tier from the call; a holder that dies takes its sandboxes with it)."""


_local_providers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LocalProvider] = weakref.WeakKeyDictionary()


def local_provider() -> LocalProvider:
    """This process's sandbox provider on the running event loop (made on first use; its keeper and every sandbox of
    it end with the process). Environments outside Serve (tests, `gym-serve env test`'s in-process checks) use it.
    One its user closed is replaced, so a later user on the same loop is never handed a closed provider."""
    loop = asyncio.get_running_loop()
    provider = _local_providers.get(loop)
    if provider is None or provider.closed:
        provider = _local_providers[loop] = LocalProvider()
    return provider


@contextlib.contextmanager
def held_by(holder: object | None) -> Iterator[None]:
    """Sandboxes made inside this block are held by `holder` (the Environment tier wraps a rollout's `seed`)."""
    token = HOLDER.set(holder)
    try:
        yield
    finally:
        HOLDER.reset(token)


class Edit(BaseModel):
    """A file's content before one editor change (what `undo_edit` puts back)."""

    path: str
    before: str | None
    """None: the file did not exist."""


class Workspace(BaseModel):
    """The state of a rollout that works in a sandbox: the sandbox's id, and the editor's undo history."""

    sandbox: str
    edits: list[Edit] = Field(default_factory=list)


TaskT = TypeVar("TaskT", bound=Task)
WorkspaceT = TypeVar("WorkspaceT", bound=Workspace)


@contextlib.contextmanager
def workspace_errors(what: str) -> Iterator[None]:
    """A sandbox's failures as the rollout's failure kinds (by type): gone is `session_lost`, no room backpressure."""
    try:
        yield
    except SandboxGone as e:
        raise SessionLostError(f"{what}: the rollout's sandbox is gone: {e}") from e
    except SandboxCapacity as e:
        raise RolloutError(f"{what}: {e}", kind=FailureKind.BACKPRESSURE) from e
    except (BaseNotFound, IsolationUnavailable, ForkLimitExceeded) as e:
        raise EnvError(f"{what}: {e}") from e


class WorkspaceEnvironment(Environment[TaskT, WorkspaceT]):
    """An environment whose rollouts each work in a sandbox (see the module docstring).

    Subclasses give the `base` of a task's sandbox (`base_for`) and may set `limits`; `reset`
    opens the workspace (override it to prepare more, then call `open_workspace`).
    """

    limits: ClassVar[Limits] = Limits()
    uses_sandboxes: ClassVar[bool] = True
    _provider: SandboxProvider | None = None

    def use_sandboxes(self, provider: SandboxProvider) -> None:
        """Make this environment's sandboxes with `provider` (the deployment's Sandbox tier)."""
        self._provider = provider

    @property
    def sandboxes(self) -> SandboxProvider:
        """The provider this environment's sandboxes come from: the one it was given, else this process's own
        (one per event loop, shared by every environment on it: `local_provider`)."""
        return self._provider if self._provider is not None else local_provider()

    def base_for(self, task: TaskT) -> Base:
        """The base a task's sandbox starts from."""
        raise NotImplementedError(f"{type(self).__name__} must implement `base_for`")

    async def open_workspace(self, task: TaskT) -> str:
        """A sandbox for one rollout of `task`, held by whoever runs the rollout; its id."""
        with workspace_errors(f"`{type(self).name()}`: opening the rollout's sandbox"):
            return await self.sandboxes.create(self.base_for(task), limits=self.limits, holder=HOLDER.get())

    async def reset(self, task: TaskT) -> WorkspaceT:
        assert self.State is not None, "a WorkspaceEnvironment's State is a Workspace"
        return self.State(sandbox=await self.open_workspace(task))  # type: ignore[return-value]

    async def close_workspace(self, state: Workspace) -> None:
        """Destroy the rollout's sandbox (verify does, once it has read what it needs)."""
        await self.sandboxes.destroy(state.sandbox)

    async def run(self, state: Workspace, command: str | list[str], *, timeout_s: float | None = None) -> ExecResult:
        with workspace_errors(f"`{type(self).name()}`: running a command in the rollout's sandbox"):
            return await self.sandboxes.exec(state.sandbox, command, timeout_s=timeout_s)

    # ---- the tools -----------------------------------------------------------------------------------------------

    @tool
    async def bash(self, state: WorkspaceT, command: str) -> str:
        """Run a bash command in the workspace (the repository is under /workspace) and see its output.

        Each call is a fresh shell: `cd` and variables do not carry over; chain commands with `&&`.
        Long output is cut; a command past its time limit is stopped.

        Args:
            command: The command, as you would type it in bash.
        """
        left = turn_time_left()
        timeout = self.limits.wall_s if left is None else max(0.1, min(self.limits.wall_s, left))
        with workspace_errors(f"`{type(self).name()}`: bash"):
            result = await self.sandboxes.exec(state.sandbox, ["bash", "-c", command], timeout_s=timeout)
        return format_exec(result, timeout)

    @tool
    async def str_replace_editor(
        self,
        state: WorkspaceT,
        command: Literal["view", "create", "str_replace", "insert", "undo_edit"],
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        """View, create and edit files in the workspace (SWE-agent's str_replace_editor).

        `view` shows a file with line numbers (or a folder's entries); `create` writes `file_text` to a
        new file; `str_replace` replaces `old_str`, which must occur exactly once, with `new_str`;
        `insert` puts `new_str` after line `insert_line` (0: at the top); `undo_edit` reverts the last
        edit of `path`.

        Args:
            command: One of view, create, str_replace, insert, undo_edit.
            path: A path in the workspace, absolute (/workspace/...) or relative to /workspace.
            file_text: The content of the file `create` makes.
            old_str: The text `str_replace` replaces (exactly once in the file).
            new_str: The replacement (`str_replace`) or the inserted text (`insert`).
            insert_line: The line `insert` puts `new_str` after.
            view_range: `[first, last]` lines `view` shows (1-based; last -1 for the end).
        """
        from gym_serve.environment import editor

        with workspace_errors(f"`{type(self).name()}`: str_replace_editor"):
            return await editor.edit(
                self.sandboxes,
                state,
                command,
                path,
                file_text=file_text,
                old_str=old_str,
                new_str=new_str,
                insert_line=insert_line,
                view_range=view_range,
            )


def format_exec(result: ExecResult, limit_s: float) -> str:
    """A command's result as the model reads it: its output, and what cut it short."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append(result.stderr.rstrip("\n"))
    if result.truncated:
        parts.append("[output truncated]")
    if result.timed_out:
        parts.append(f"[the command did not finish within {limit_s:g} s and was stopped]")
    elif result.exit_code != 0:
        parts.append(f"[exit code {result.exit_code if result.exit_code is not None else -(result.signal or 0)}]")
    return "\n".join(parts) if parts else "[no output]"
