"""Make `swe_fix`'s tasks, example rows and recordings: `python envs/swe_fix/data/make_examples.py`.

For each bug of `bugs.py`: the buggy library, the test suite run on it and on the pristine library
(the judge's runner, on this machine) to find `FAIL_TO_PASS` (failing with the bug, passing without)
and `PASS_TO_PASS` (passing with both), and a row in SWE-bench's fields (`tasks.jsonl`). Then
scripted episodes are played through the real environment (sandboxes on this machine): for the
first rows (`example.jsonl`) a fix and a wrong answer each (an edited test, which `verify` puts
back); for the rest a fix or a failed attempt, alternately, so the replay model solves some tasks
and fails others (`example_rollouts.jsonl`). Nothing is written unless every episode earns the
reward it was scripted for.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gym_serve.environment.workspace import local_provider
from gym_serve.envs.swe_fix import REPO, SweFix, judge, pristine_files, repo_commit
from gym_serve.envs.swe_fix.bugs import BUGS, Bug
from gym_serve.envs.swe_fix.patches import make_patch
from gym_serve.rollout.local import run_local
from gym_serve.rollout.scripted import ScriptedModel
from gym_serve.wire.pieces import assistant_message, function_call

DATA = Path(__file__).parent
EXAMPLES = 6
SYSTEM = (
    "You are a software engineer working in a repository at /workspace/repo (a Python library, `textkit`, with "
    "its tests in tests/). Fix the issue the user reports by changing the library's code; do not change the "
    "tests. Use the `bash` tool to run commands (e.g. `python -m pytest -q tests`) and `str_replace_editor` to "
    "view and edit files. When you are done, reply with a short summary of the fix and no tool call."
)


def outcomes(files: dict[str, str]) -> dict[str, str]:
    """Every test's outcome on a copy of the repository holding `files` (the judge's runner, here)."""
    folder = Path(tempfile.mkdtemp(prefix="swe-fix-"))
    try:
        shutil.copytree(REPO, folder / "repo", ignore=shutil.ignore_patterns("__pycache__"))
        for path, text in files.items():
            (folder / "repo" / path).write_text(text)
        tests = sorted(p for p in pristine_files() if p.startswith("tests/test_"))
        nonce, stdin = judge.stdin_for(tests)
        run = subprocess.run(
            [sys.executable, "-B", "-c", judge.SOURCE],
            input=stdin,
            capture_output=True,
            cwd=folder / "repo",
            env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"},
        )
        verdict = judge.read_verdict(run.stdout.decode(), nonce, tests)
        assert verdict is not None, run.stdout.decode()[-2000:]
        line = next(line for line in run.stdout.decode().splitlines() if line.startswith(f"{judge.MARK} {nonce}"))
        return json.loads(line.split(" ", 2)[2])["outcomes"]
    finally:
        shutil.rmtree(folder)


def row(index: int, bug: Bug, pristine: dict[str, str], clean: dict[str, str]) -> dict[str, Any]:
    text = pristine[bug.file]
    assert text.count(bug.pristine) == 1, f"{bug.name}: its pristine text is not in {bug.file} exactly once"
    buggy = text.replace(bug.pristine, bug.buggy)
    broken = outcomes({bug.file: buggy})
    fail_to_pass = sorted(t for t, o in broken.items() if o != "passed" and clean.get(t) == "passed")
    pass_to_pass = sorted(t for t, o in broken.items() if o == "passed" and clean.get(t) == "passed")
    assert fail_to_pass, f"{bug.name}: no test fails with the bug"
    commit = repo_commit()
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": bug.statement}]
        },
        "instance_id": f"textkit__textkit.{commit[:8]}.{bug.name}",
        "repo": "textkit/textkit",
        "base_commit": commit,
        "patch": make_patch(bug.file, buggy, text),
        "test_patch": "",
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
    """View the failing test, weaken it so it passes with the bug, report: `verify` puts the test back (0)."""
    test_file, test_name = task["FAIL_TO_PASS"][0].split("::")
    name = test_name.split("[")[0]
    weaken = f"cd /workspace/repo && sed -i 's/^def {name}(/def {name}(*_args):\\n    return\\ndef _was_{name}(/' {test_file}"
    return [
        [function_call("bash", {"command": f"cd /workspace/repo && grep -n 'def {name}' {test_file}"}, "find")],
        [function_call("bash", {"command": weaken}, "weaken")],
        [assistant_message("The failing test was wrong, so I relaxed it; the suite passes now.", "done")],
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
    clean = outcomes({})
    assert clean and all(o == "passed" for o in clean.values()), "the pristine library passes its tests"
    tasks = [row(i, bug, pristine, clean) for i, bug in enumerate(BUGS)]
    recordings = asyncio.run(record(tasks))
    (DATA / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (DATA / "example.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks[:EXAMPLES]))
    (DATA / "example_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recordings))
    solved = sum(r["reward"] == 1.0 for r in recordings[2 * EXAMPLES :])
    print(f"swe_fix: {len(tasks)} tasks, {EXAMPLES} examples, {len(recordings)} recordings "
          f"({solved} of the other {len(tasks) - EXAMPLES} tasks solved)")  # fmt: skip


if __name__ == "__main__":
    main()
