"""Make `swe_fix`'s tasks, example rows and recordings: `python envs/swe_fix/data/make_examples.py`.

For each bug of `bugs.py`: the buggy library, and the test suite with the bug's held-out tests
(`tests/test_held_out.py`) run on it and on the pristine library (`gym_serve.sandbox.judge.run_pytest`, as
`verify` runs them) to find `FAIL_TO_PASS` (failing with the bug, passing without) and `PASS_TO_PASS` (passing
with both), and a row in SWE-bench's fields (`tasks.jsonl`). Its `test_patch` adds what the agent does not see:
the test functions that hold a failing test (taken out of its copy of the suite) and the held-out tests. Then
scripted episodes are played through the real environment (sandboxes on this machine): for the first rows
(`example.jsonl`) a fix and a wrong answer each (the visible tests pass, so it reports nothing to fix); for the
rest a fix or that wrong answer, alternately, so the replay model solves some tasks and fails others
(`example_rollouts.jsonl`). Nothing is written unless every episode earns the reward it was scripted for.
"""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any

from gym_serve.environment.workspace import local_provider
from gym_serve.envs.swe_fix import LIBRARY, SweFix, pristine_files, repo_commit
from gym_serve.envs.swe_fix.bugs import BUGS, Bug
from gym_serve.envs.swe_fix.patches import make_patch
from gym_serve.rollout.local import run_local
from gym_serve.rollout.scripted import ScriptedModel
from gym_serve.sandbox.judge import run_pytest
from gym_serve.wire.pieces import assistant_message, function_call

DATA = Path(__file__).parent
EXAMPLES = 6
HELD_OUT = "tests/test_held_out.py"
SYSTEM = (
    "You are a software engineer working in a repository at /workspace/repo (a Python library, `textkit`, with "
    "its tests in tests/). Fix the issue the user reports by changing the library's code; do not change the "
    "tests. Use the `bash` tool to run commands (e.g. `python -m pytest -q tests`) and `str_replace_editor` to "
    "view and edit files. When you are done, reply with a short summary of the fix and no tool call."
)


def outcomes(library: dict[str, str], tests: dict[str, str]) -> dict[str, str]:
    """Every test's outcome (of `tests`, the suite and its config) against `library`, as `verify` runs them."""
    ids = sorted(path for path in tests if path.startswith("tests/test_"))
    files = {path: text.encode() for path, text in library.items()}
    result = asyncio.run(run_pytest(LIBRARY, files, tests, ids, config="pyproject.toml"))
    assert "harness_error" not in result and not result["collection_errors"], result
    return result["outcomes"]


def without_functions(text: str, names: set[str]) -> str:
    """A test module with these top-level test functions (and their decorators) taken out."""
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            last = node.end_lineno or node.lineno
            while last < len(lines) and not lines[last].strip():  # the blank lines after it
                last += 1
            drop |= set(range(first, last))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def row(index: int, bug: Bug, pristine: dict[str, str], clean_library: dict[str, str]) -> dict[str, Any]:
    text = pristine[bug.file]
    assert text.count(bug.pristine) == 1, f"{bug.name}: its pristine text is not in {bug.file} exactly once"
    buggy = text.replace(bug.pristine, bug.buggy)
    suite = {path: text for path, text in pristine.items() if not path.startswith(f"{LIBRARY}/")}
    held = {**suite, HELD_OUT: "import pytest\n\n\n" + bug.held_out}
    clean = outcomes(clean_library, held)
    broken = outcomes({**clean_library, bug.file: buggy}, held)
    assert clean and all(o == "passed" for o in clean.values()), f"{bug.name}: the pristine library fails {clean}"
    fail_to_pass = sorted(t for t, o in broken.items() if o != "passed")
    pass_to_pass = sorted(t for t, o in broken.items() if o == "passed")
    held_out = {t for t in clean if t.startswith(HELD_OUT)}
    assert fail_to_pass and held_out <= set(fail_to_pass), f"{bug.name}: its held-out tests must fail with the bug"
    hidden: dict[str, set[str]] = {}  # test module -> the functions that hold a failing test
    for test in fail_to_pass:
        path, name = test.split("::")
        if path != HELD_OUT:
            hidden.setdefault(path, set()).add(name.split("[")[0])
    test_patch = "".join(make_patch(path, without_functions(suite[path], names), suite[path]) for path, names in
                         sorted(hidden.items())) + make_patch(HELD_OUT, None, held[HELD_OUT])  # fmt: skip
    commit = repo_commit()
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": bug.statement}]
        },
        "instance_id": f"textkit__textkit.{commit[:8]}.{bug.name}",
        "repo": "textkit/textkit",
        "base_commit": commit,
        "patch": make_patch(bug.file, buggy, text),
        "test_patch": test_patch,
        "problem_statement": bug.statement,
        "hints_text": "",
        "created_at": f"2026-01-{index + 1:02d}T00:00:00Z",
        "version": "1.4",
        "FAIL_TO_PASS": fail_to_pass,
        "PASS_TO_PASS": pass_to_pass,
        "environment_setup_commit": commit,
        "image_name": "gym-serve/textkit:1.4.0",
    }


def fix_edit(bug: Bug) -> tuple[str, str]:
    """`str_replace`'s old and new text for the fix: the bug with the line before it, unique in the buggy module."""
    text = pristine_files()[bug.file]
    start = text.index(bug.pristine)
    before = text[:start].rsplit("\n", 2)
    context = "\n".join(before[-2:]) if len(before) > 2 else text[:start]
    old, new = context + bug.buggy, context + bug.pristine
    assert text.replace(bug.pristine, bug.buggy).count(old) == 1, f"{bug.name}: the edit's text is not unique"
    return old, new


def solve(bug: Bug) -> list[list[dict[str, Any]]]:
    """View the module, replace the bug with the fix, run the module's tests, report."""
    path = f"/workspace/repo/{bug.file}"
    test_file = f"tests/test_{Path(bug.file).stem}.py"
    check = f"cd /workspace/repo && python -m pytest -q {test_file} 2>&1 | tail -n 1 | sed -E 's/ in [0-9.]+s//'"
    old, new = fix_edit(bug)
    edit = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
    return [
        [function_call("str_replace_editor", {"command": "view", "path": path}, "view")],
        [function_call("str_replace_editor", edit, "edit")],
        [function_call("bash", {"command": check}, "test")],
        [assistant_message(f"Fixed `{bug.file}`: {bug.name.replace('_', ' ')}.", "done")],
    ]


def fail(bug: Bug, task: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """View the module, run the tests it can see (they pass: the failing ones are held out), report that there is
    nothing to fix: `verify`'s tests fail (0)."""
    test_file = f"tests/test_{Path(bug.file).stem}.py"
    check = f"cd /workspace/repo && python -m pytest -q {test_file} 2>&1 | tail -n 1 | sed -E 's/ in [0-9.]+s//'"
    return [
        [function_call("str_replace_editor", {"command": "view", "path": f"/workspace/repo/{bug.file}"}, "view")],
        [function_call("bash", {"command": check}, "test")],
        [assistant_message("The tests all pass, so I could not reproduce the issue; nothing to fix.", "done")],
    ]


async def play(env: SweFix, task: dict[str, Any], turns: list[list[dict[str, Any]]], meant: float) -> dict[str, Any]:
    rollout = await run_local(task, env, ScriptedModel(turns))
    if rollout["reward"] != meant:
        raise SystemExit(f"{task['instance_id']}: scored {rollout['reward']}, scripted for {meant}: {rollout}")
    return {**task, "response": {**rollout["response"], "id": "resp_recorded", "model": "recorded"}, "reward": meant}


async def record(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = SweFix()
    recordings = []
    for index, (bug, task) in enumerate(zip(BUGS, tasks, strict=True)):
        if index < EXAMPLES:
            recordings += [await play(env, task, solve(bug), 1.0), await play(env, task, fail(bug, task), 0.0)]
        elif index % 2:
            recordings.append(await play(env, task, fail(bug, task), 0.0))
        else:
            recordings.append(await play(env, task, solve(bug), 1.0))
    await local_provider().close()
    return recordings


def main() -> None:
    pristine = pristine_files()
    library = {path: text for path, text in pristine.items() if path.startswith(f"{LIBRARY}/")}
    tasks = [row(i, bug, pristine, library) for i, bug in enumerate(BUGS)]
    recordings = asyncio.run(record(tasks))
    (DATA / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (DATA / "example.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks[:EXAMPLES]))
    (DATA / "example_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recordings))
    solved = sum(r["reward"] == 1.0 for r in recordings[2 * EXAMPLES :])
    print(f"swe_fix: {len(tasks)} tasks, {EXAMPLES} examples, {len(recordings)} recordings "
          f"({solved} of the other {len(tasks) - EXAMPLES} tasks solved)")  # fmt: skip


if __name__ == "__main__":
    main()
