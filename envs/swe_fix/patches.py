"""Unified diffs of the library's files: made with `difflib`, applied (either way) by `apply`.

A task row's `patch` is SWE-bench's: the gold fix, a diff from the task's starting state to the
pristine library; its `test_patch` the tests `verify` adds (the task's failing tests, taken out of the
agent's copy, and a new file of held-out tests). The environment makes the starting state by applying
both in reverse (a file a patch creates is then simply not there).
"""

from __future__ import annotations

import difflib
import re

__all__ = ["PatchError", "apply", "make_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """Raised when a patch does not apply to the files it names."""


def make_patch(path: str, before: str | None, after: str) -> str:
    """A git-style unified diff of one file (3 lines of context); `before=None` creates it."""
    old = "/dev/null" if before is None else f"a/{path}"
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True), after.splitlines(keepends=True), old, f"b/{path}"
    )
    header = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if before is None else "")
    return header + "".join(lines)


def apply(files: dict[str, str], patch: str, *, reverse: bool = False) -> dict[str, str]:
    """The files `patch` changes, changed (`reverse`: undone); the context must match exactly."""
    changed: dict[str, str] = {}
    created = _created(patch)
    for path, hunks in _parse(patch).items():
        if path in created and path not in files:
            if reverse:
                continue  # undoing a creation: the file is not there
            files = {**files, path: ""}
        if path not in files:
            raise PatchError(f"the patch changes `{path}`, which is not in the repository")
        lines = files[path].splitlines(keepends=True)
        offset = 0
        for old_start, new_start, body in hunks:
            start = new_start if reverse else old_start
            old = [text for sign, text in body if sign != ("-" if reverse else "+")]
            new = [text for sign, text in body if sign != ("+" if reverse else "-")]
            at = start - 1 + offset if start else 0
            if lines[at : at + len(old)] != old:
                raise PatchError(f"`{path}`: a hunk at line {start} does not match the file")
            lines[at : at + len(old)] = new
            offset += len(new) - len(old)
        changed[path] = "".join(lines)
    return changed


def _created(patch: str) -> set[str]:
    """The files `patch` creates (`--- /dev/null`)."""
    lines = patch.splitlines()
    return {
        new[4:].strip().removeprefix("b/")
        for old, new in zip(lines, lines[1:], strict=False)
        if old.startswith("--- /dev/null") and new.startswith("+++ ")
    }


def _parse(patch: str) -> dict[str, list[tuple[int, int, list[tuple[str, str]]]]]:
    files: dict[str, list[tuple[int, int, list[tuple[str, str]]]]] = {}
    path = None
    body: list[tuple[str, str]] | None = None
    for line in patch.splitlines(keepends=True):
        if line.startswith("+++ "):
            path = line[4:].strip().removeprefix("b/")
            files[path] = []
        elif line.startswith(("--- ", "diff ")):
            continue
        elif (match := _HUNK.match(line)) and path is not None:
            body = []
            files[path].append((int(match.group(1)), int(match.group(3)), body))
        elif body is not None and line[:1] in (" ", "-", "+"):
            body.append((line[:1], line[1:]))
        elif body is not None and line.startswith("\\"):
            continue  # "\ No newline at end of file"
    return files
