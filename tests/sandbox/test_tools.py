"""`bash` and `str_replace_editor`, the tools any `WorkspaceEnvironment` has: their schemas, and what each does.

Called the way the agent calls them (`EnvRunner.call_tools`, arguments as JSON), on a small environment whose
rollouts work in sandboxes of this process's provider.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gym_serve.environment.core import Task
from gym_serve.environment.runner import EnvRunner
from gym_serve.environment.workspace import Workspace, WorkspaceEnvironment
from gym_serve.errors import EnvError, FailureKind, SessionLostError, failure_kind
from gym_serve.sandbox import Base, BaseFile, Limits

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Notes(WorkspaceEnvironment[Task, Workspace]):
    """A workspace with one file; the reward is whether `done.txt` says `done`."""

    limits = Limits(wall_s=5.0, output_bytes=2000)

    def base_for(self, task: Task) -> Base:
        return Base(files=(BaseFile(dest="notes/todo.md", text="# todo\n- write tests\n- fix bug\n"),), name="notes")

    async def verify(self, task: Task, response: Any, state: Workspace) -> float:
        done = await self.run(state, "cat done.txt")
        await self.close_workspace(state)
        return 1.0 if done.stdout.strip() == "done" else 0.0


ROW = {"responses_create_params": {"input": "write done.txt"}}


async def call(runner: EnvRunner, state: Any, name: str, **arguments: Any) -> tuple[str, Any]:
    """One tool call as the agent makes it: its output, and the rollout's state after it."""
    calls = [{"call_id": "c", "name": name, "arguments": json.dumps(arguments)}]
    outputs, state = await runner.call_tools(calls, state)
    return outputs[0]["output"], state


async def edit(runner: EnvRunner, state: Any, **arguments: Any) -> tuple[str, Any]:
    return await call(runner, state, "str_replace_editor", **arguments)


async def test_the_tools_are_typed_like_every_tool() -> None:
    tools = {tool["name"]: tool for tool in EnvRunner(Notes()).describe().tools}
    assert set(tools) == {"bash", "str_replace_editor"}
    editor = tools["str_replace_editor"]["parameters"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert editor["required"] == ["command", "path"] and "state" not in editor["properties"]
    assert tools["bash"]["parameters"]["required"] == ["command"]


async def test_bash_runs_in_the_rollouts_workspace_and_reports_what_cut_it_short() -> None:
    runner = EnvRunner(Notes())
    state = await runner.seed(ROW)
    output, state = await call(runner, state, "bash", command="cat notes/todo.md | wc -l && pwd")
    assert output == "3\n/workspace"
    output, state = await call(runner, state, "bash", command="echo err >&2; exit 4")
    assert output == "err\n[exit code 4]"
    output, state = await call(runner, state, "bash", command="sleep 30")
    assert output == "[the command did not finish within 5 s and was stopped]"
    output, state = await call(runner, state, "bash", command="seq 1 100000")
    assert output.endswith("[output truncated]") and len(output) < 2100
    output, state = await call(runner, state, "bash", command="echo done > done.txt")
    assert output == "[no output]"
    assert (await runner.verify(ROW, {"output": []}, state))["reward"] == 1.0


async def test_the_editor_views_creates_replaces_inserts_and_undoes() -> None:
    runner = EnvRunner(Notes())
    state = await runner.seed(ROW)
    output, state = await edit(runner, state, command="view", path="notes/todo.md")
    assert output.endswith("     1\t# todo\n     2\t- write tests\n     3\t- fix bug\n     4\t")
    output, state = await edit(runner, state, command="view", path="/workspace")
    assert "/workspace/notes/\n/workspace/notes/todo.md" in output
    output, state = await call(
        runner,
        state,
        "str_replace_editor",
        command="str_replace",
        path="notes/todo.md",
        old_str="fix bug",
        new_str="fix the bug",
    )
    assert "has been edited" in output and "     3\t- fix the bug" in output
    output, state = await edit(runner, state, command="str_replace", path="notes/todo.md", old_str="- ", new_str="* ")
    assert output.startswith("Error: No replacement was performed. Multiple occurrences")
    output, state = await edit(runner, state, command="insert", path="notes/todo.md", insert_line=1, new_str="- ship")
    assert "     2\t- ship" in output
    output, state = await edit(runner, state, command="undo_edit", path="notes/todo.md")
    assert "undone successfully" in output and "- ship" not in output and "- fix the bug" in output
    output, state = await edit(runner, state, command="create", path="done.txt", file_text="done\n")
    assert output == "File created successfully at: /workspace/done.txt"
    output, state = await edit(runner, state, command="create", path="done.txt", file_text="x")
    assert output.startswith("Error: a file already exists")
    output, state = await edit(runner, state, command="view", path="/etc/passwd")
    assert output.startswith("Error: tool `str_replace_editor` failed: PathOutsideWorkspace")
    output, state = await edit(runner, state, command="view", path="missing.txt")
    assert output == "Error: the path /workspace/missing.txt does not exist. Give a path in the workspace."
    output, state = await edit(runner, state, command="undo_edit", path="done.txt")
    assert "the file it created is removed" in output
    assert (await runner.verify(ROW, {"output": []}, state))["reward"] == 0.0


class Nowhere(Notes):
    """A workspace environment whose base folder does not exist."""

    def base_for(self, task: Task) -> Base:
        return Base(folder="/nonexistent/gym-serve-base")


async def test_a_sandboxs_failures_are_the_rollouts_failure_kinds() -> None:
    with pytest.raises(EnvError, match="/nonexistent/gym-serve-base") as missing:
        await EnvRunner(Nowhere()).seed(ROW)
    assert failure_kind(missing.value) is FailureKind.ENV_ERROR
    runner = EnvRunner(Notes())
    state = await runner.seed(ROW)
    await runner.env.sandboxes.destroy(state["sandbox"])  # type: ignore[attr-defined]  # gone under the rollout
    with pytest.raises(SessionLostError) as lost:
        await call(runner, state, "bash", command="true")
    assert failure_kind(lost.value) is FailureKind.SESSION_LOST
    output, _ = await call(runner, await runner.seed(ROW), "str_replace_editor", command="view", path="../../etc")
    assert output.startswith("Error: tool `str_replace_editor` failed: PathOutsideWorkspace")  # the model's to read
