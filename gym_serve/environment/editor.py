"""The file viewer and editor of `WorkspaceEnvironment.str_replace_editor`, in SWE-agent's manner.

Every read and write goes through the sandbox provider (beneath the workspace only); each edit keeps
the file's previous content in the rollout's state, so `undo_edit` can put it back. Mistakes (a path
that does not exist, an `old_str` found twice) are answers the model reads, never failures.
"""

from __future__ import annotations

from typing import TypeVar

from gym_serve.environment.workspace import Edit, Workspace
from gym_serve.sandbox import NotAFile, SandboxFileNotFound, SandboxProvider

__all__ = ["edit"]

T = TypeVar("T")

WORKSPACE = "/workspace"
_SNIPPET_LINES = 4
_VIEW_MAX_LINES = 400
_MAX_HISTORY_BYTES = 1 << 20


class _Refused(Exception):
    """An editor command the model got wrong: the message is its answer."""


async def edit(
    sandboxes: SandboxProvider,
    state: Workspace,
    command: str,
    path: str,
    *,
    file_text: str | None,
    old_str: str | None,
    new_str: str | None,
    insert_line: int | None,
    view_range: list[int] | None,
) -> str:
    editor = _Editor(sandboxes, state)
    try:
        if command == "view":
            return await editor.view(path, view_range)
        if command == "create":
            return await editor.create(path, _required(file_text, "file_text", command))
        if command == "str_replace":
            return await editor.str_replace(path, _required(old_str, "old_str", command), new_str or "")
        if command == "insert":
            line = _required(insert_line, "insert_line", command)
            return await editor.insert(path, line, _required(new_str, "new_str", command))
        return await editor.undo(path)
    except _Refused as e:
        return f"Error: {e}"


def _required(value: T | None, name: str, command: str) -> T:
    if value is None:
        raise _Refused(f"`{command}` needs `{name}`")
    return value


class _Editor:
    def __init__(self, sandboxes: SandboxProvider, state: Workspace) -> None:
        self.sandboxes = sandboxes
        self.state = state

    async def read(self, path: str) -> str:
        try:
            data = await self.sandboxes.read_file(self.state.sandbox, path)
        except SandboxFileNotFound:
            raise _Refused(f"the path {_shown(path)} does not exist. Give a path in the workspace.") from None
        except NotAFile:
            raise _Refused(f"{_shown(path)} is a directory, not a file") from None
        return data.decode(errors="replace")

    async def exists(self, path: str) -> bool:
        try:
            await self.sandboxes.read_file(self.state.sandbox, path)
        except SandboxFileNotFound:
            return False
        except NotAFile:
            return True
        return True

    async def write(self, path: str, text: str, before: str | None) -> None:
        await self.sandboxes.write_file(self.state.sandbox, path, text.encode())
        self.state.edits.append(Edit(path=_key(path), before=before))
        while sum(len(e.before or "") for e in self.state.edits) > _MAX_HISTORY_BYTES and len(self.state.edits) > 1:
            self.state.edits.pop(0)

    async def view(self, path: str, view_range: list[int] | None) -> str:
        try:
            text = await self.read(path)
        except _Refused:
            listing = await self._listing(path)
            if listing is None:
                raise
            return listing
        lines = text.split("\n")
        first, last = 1, len(lines)
        if view_range is not None:
            if len(view_range) != 2:
                raise _Refused("`view_range` is two numbers: [first, last]")
            first, last = view_range[0], (len(lines) if view_range[1] == -1 else view_range[1])
            if not 1 <= first <= len(lines) or last < first or last > len(lines):
                raise _Refused(f"`view_range` {view_range} is outside the file's lines 1..{len(lines)}")
        cut = last - first + 1 > _VIEW_MAX_LINES
        if cut:
            last = first + _VIEW_MAX_LINES - 1
        shown = _numbered(lines[first - 1 : last], first)
        note = f"\n[showing lines {first}-{last} of {len(lines)}; use view_range for more]" if cut else ""
        return f"Here's the result of running `cat -n` on {_shown(path)}:\n{shown}{note}"

    async def _listing(self, path: str) -> str | None:
        try:
            entries = await self.sandboxes.list_files(self.state.sandbox, path)
        except (SandboxFileNotFound, NotAFile):
            return None
        lines = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            lines.append(f"{_join(path, entry.name)}{'/' if entry.kind == 'dir' else ''}")
            if entry.kind == "dir":
                try:
                    inner = await self.sandboxes.list_files(self.state.sandbox, _join(path, entry.name))
                except (SandboxFileNotFound, NotAFile):
                    continue
                lines += [
                    f"{_join(path, entry.name, e.name)}{'/' if e.kind == 'dir' else ''}"
                    for e in inner
                    if not e.name.startswith(".")
                ]
        heading = f"Here are the files and directories up to 2 levels deep in {_shown(path)}, excluding hidden items:"
        return "\n".join([heading, *lines])

    async def create(self, path: str, text: str) -> str:
        if await self.exists(path):
            raise _Refused(f"a file already exists at {_shown(path)}. Cannot overwrite files using `create`.")
        await self.write(path, text, None)
        return f"File created successfully at: {_shown(path)}"

    async def str_replace(self, path: str, old: str, new: str) -> str:
        text = await self.read(path)
        count = text.count(old)
        if count == 0:
            raise _Refused(f"No replacement was performed, `old_str` did not appear verbatim in {_shown(path)}.")
        if count > 1:
            lines = [i + 1 for i, line in enumerate(text.split("\n")) if old.split("\n")[0] in line]
            raise _Refused(
                f"No replacement was performed. Multiple occurrences of `old_str` in lines {lines}. Please ensure it "
                "is unique"
            )
        updated = text.replace(old, new, 1)
        await self.write(path, updated, text)
        at = text[: text.index(old)].count("\n") + 1
        return (
            f"The file {_shown(path)} has been edited. Here's the result of running `cat -n` on a snippet:\n"
            f"{_snippet(updated, at, new.count(chr(10)) + 1)}\nReview the changes and make sure they are as "
            "expected. Edit the file again if necessary."
        )

    async def insert(self, path: str, line: int, new: str) -> str:
        text = await self.read(path)
        lines = text.split("\n")
        if not 0 <= line <= len(lines):
            raise _Refused(f"`insert_line` {line} is outside the file's lines 0..{len(lines)}")
        updated = "\n".join([*lines[:line], *new.split("\n"), *lines[line:]])
        await self.write(path, updated, text)
        return (
            f"The file {_shown(path)} has been edited. Here's the result of running `cat -n` on a snippet:\n"
            f"{_snippet(updated, line + 1, new.count(chr(10)) + 1)}\nReview the changes and make sure they are as "
            "expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary."
        )

    async def undo(self, path: str) -> str:
        key = _key(path)
        for index in range(len(self.state.edits) - 1, -1, -1):
            change = self.state.edits[index]
            if change.path == key:
                del self.state.edits[index]
                if change.before is None:
                    await self.sandboxes.exec(self.state.sandbox, ["rm", "-f", "--", _absolute(path)])
                    return f"Last edit to {_shown(path)} undone: the file it created is removed."
                await self.sandboxes.write_file(self.state.sandbox, path, change.before.encode())
                now = _numbered(change.before.split("\n"), 1)
                return f"Last edit to {_shown(path)} undone successfully. Here it is now:\n{now}"
        raise _Refused(f"No edit history found for {_shown(path)}.")


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{number:6}\t{line}" for number, line in enumerate(lines, start=first))


def _snippet(text: str, at: int, changed: int) -> str:
    lines = text.split("\n")
    start = max(1, at - _SNIPPET_LINES)
    end = min(len(lines), at + changed - 1 + _SNIPPET_LINES)
    return _numbered(lines[start - 1 : end], start)


def _absolute(path: str) -> str:
    return path if path.startswith("/") else f"{WORKSPACE}/{path}"


def _key(path: str) -> str:
    return _absolute(path).rstrip("/")


def _shown(path: str) -> str:
    return _absolute(path)


def _join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in (_absolute(parts[0]), *parts[1:]))
