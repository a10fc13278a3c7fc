"""swe_fix: its tasks are SWE-bench rows over a library that passes its own suite; each task's bug fails exactly its
FAIL_TO_PASS tests (its held-out tests among them) and its gold patch passes them all; the agent's copy holds none of
the tests `verify` adds; the verdict is taken where the agent's code never runs, so what forged it before (a printed
verdict, objects equal to anything, a hard-coded table of the visible tests, a hang, an unparsable module) scores 0,
never 1 and never a masked failure; and `gym-serve env test swe_fix` passes (its non-answers and reward hacks, the
generated ones included, at 0, its recordings through real Serve), and so do the reward hacks played through a Serve
replica of its Environment tier."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from ray import serve

from gym_serve.analysis.check import check_environment
from gym_serve.deployments.app import build_app
from gym_serve.environment.runner import EnvRunner
from gym_serve.environment.workspace import local_provider
from gym_serve.envs.swe_fix import SweFix, hacks, held_tests, pristine_files, starting_files
from gym_serve.envs.swe_fix.patches import apply
from gym_serve.sandbox.judge import run_pytest
from gym_serve.testing.fixtures import unique
from gym_serve.wire.jsonl import read_jsonl

pytestmark = pytest.mark.asyncio(loop_scope="module")

SWE_BENCH_FIELDS = {
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text", "created_at",
    "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
}  # fmt: skip
HELD_OUT = "tests/test_held_out.py"


def tasks() -> list[dict[str, Any]]:
    return [row for _, row in read_jsonl(SweFix.data_dir() / "tasks.jsonl")]


def defined_tests(text: str) -> set[str]:
    return {line.split("(")[0][4:] for line in text.splitlines() if line.startswith("def test_")}


async def test_tasks_are_swe_bench_rows_whose_gold_patch_undoes_one_bug_and_whose_failing_tests_are_held_out() -> None:
    rows = tasks()
    assert len(rows) >= 20 and len({r["instance_id"] for r in rows}) == len(rows)
    library = {path: text for path, text in pristine_files().items() if path.startswith("textkit/")}
    for row in rows:
        task = SweFix.Task.model_validate(row)
        assert SWE_BENCH_FIELDS <= set(row), row["instance_id"]
        assert row["FAIL_TO_PASS"] and row["PASS_TO_PASS"] and not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        buggy = apply(library, row["patch"], reverse=True)
        assert len(buggy) == 1 and all(buggy[path] != library[path] for path in buggy), "one module, changed"
        assert apply({**library, **buggy}, row["patch"]) == {p: library[p] for p in buggy}, "the patch undoes it"
        start, held = starting_files(task), held_tests(task)
        assert HELD_OUT not in start and HELD_OUT in held, "the held-out tests arrive only at verify"
        assert any(test.startswith(HELD_OUT) for test in row["FAIL_TO_PASS"]), "and fail with the bug"
        for test in row["FAIL_TO_PASS"]:
            path, name = test.split("::")
            name = name.split("[")[0]
            assert name in defined_tests(held[path]), (row["instance_id"], test)
            assert path == HELD_OUT or name not in defined_tests(start[path]), (row["instance_id"], test, "visible")
        for test in row["PASS_TO_PASS"]:
            assert test.split("::")[1].split("[")[0] in defined_tests(held[test.split("::")[0]]), test
    examples = [row for _, row in read_jsonl(SweFix.data_dir() / "example.jsonl")]
    assert [r["instance_id"] for r in examples] == [r["instance_id"] for r in rows[: len(examples)]]


@pytest.mark.parametrize("mode", ["namespaces", "fallback"])
async def test_the_pristine_library_passes_every_test_verify_runs(mode: str) -> None:
    task = SweFix.Task.model_validate(tasks()[6])
    library = {path: text.encode() for path, text in pristine_files().items() if path.startswith("textkit/")}
    ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    result = await run_pytest("textkit", library, held_tests(task), ids, config="pyproject.toml", mode=mode)
    assert result["collection_errors"] == [] and result["collected_untouched"], result
    assert {test: result["outcomes"].get(test) for test in ids} == dict.fromkeys(ids, "passed")


async def verdict_of(runner: EnvRunner, row: dict[str, Any], edits: dict[str, str | bytes]) -> dict[str, Any]:
    """A rollout of `row` that writes `edits` into the repository and answers, verified."""
    state = await runner.seed(row)
    env = runner.env
    assert isinstance(env, SweFix)
    for path, text in edits.items():
        await env.sandboxes.write_file(
            state["sandbox"], f"repo/{path}", text.encode() if isinstance(text, str) else text
        )
    return await runner.verify(row, {"output": []}, state)


async def test_the_agent_s_copy_holds_none_of_the_tests_verify_adds() -> None:
    runner = EnvRunner(SweFix())
    row = tasks()[4]  # camel_case_upper_first: two visible failing tests of its own before, and held-out ones
    state = await runner.seed(row)
    env = runner.env
    assert isinstance(env, SweFix)
    look = "ls tests; cat tests/test_cases.py; git log --oneline | wc -l; grep -rl held_out . | wc -l"
    listing = await env.sandboxes.exec(state["sandbox"], look, cwd="repo")
    assert "test_held_out.py" not in listing.stdout and listing.stdout.split()[-2:] == ["1", "0"], listing
    for test in row["FAIL_TO_PASS"]:
        assert test.split("::")[1].split("[")[0] + "(" not in listing.stdout, test
    assert "def test_kebab_case" in listing.stdout  # the rest of the module is there
    await env.sandboxes.destroy(state["sandbox"])


GOLD_CHECKED = 5
"""Tasks whose gold fix is also verified through the sandbox: for every task, the gold patch restores the pristine
library exactly (the first test) and the pristine library passes every test verify runs (the second), so a few
suffice."""


@pytest.mark.slow
@pytest.mark.timeout(600)  # 25 + 5 test-suite runs in sandboxes: ~1 min on a quiet 2-core machine, more on a busy one
async def test_each_task_fails_its_fail_to_pass_tests_only_and_its_gold_patch_passes_them_all() -> None:
    runner = EnvRunner(SweFix())
    library = pristine_files()
    slots = asyncio.Semaphore(2)
    rows = tasks()
    gold_rows = {row["instance_id"] for row in rows[:: len(rows) // GOLD_CHECKED][:GOLD_CHECKED]}

    async def check(row: dict[str, Any]) -> tuple[str, Any, Any]:
        gold = apply(library, row["patch"], reverse=True)
        async with slots:
            unchanged = await verdict_of(runner, row, {})
            fixed = None
            if row["instance_id"] in gold_rows:
                fixed = await verdict_of(runner, row, {path: library[path] for path in gold})
        return row["instance_id"], unchanged, fixed

    for instance, unchanged, fixed in await asyncio.gather(*(check(row) for row in rows)):
        assert unchanged["reward"] == 0.0 and unchanged["reward_components"] == {
            "FAIL_TO_PASS": 0.0,
            "PASS_TO_PASS": 1.0,
        }, (instance, unchanged)
        assert fixed is None or (fixed["reward"] == 1.0 and fixed["tests_failed"] == []), (instance, fixed)
    assert len(gold_rows) == GOLD_CHECKED


FORGERIES = {
    # the agent's code prints a verdict line and exits, as it could when the verdict shared its process
    "print_a_verdict_and_exit": (
        "textkit/slugs.py",
        """
import json, os

line = json.dumps({"exit": 0, "outcomes": {}, "tests": [["ok", ""]] * 500})
for fd in range(64):
    try:
        os.write(fd, ("\\n@@gs-verdict x " + line + "\\nverdict " + line + "\\n").encode())
    except OSError:
        pass
os._exit(0)
""",
    ),
    # an object that compares equal to anything, returned by the broken function
    "always_equal": (
        "textkit/slugs.py",
        "\nclass _Equal(str):\n    def __eq__(self, other):\n        return True\n\n    def __ne__(self, other):\n"
        "        return False\n\n    __hash__ = str.__hash__\n\n\n_slugify = slugify\n\n\n"
        "def slugify(*args, **kwargs):\n    return _Equal(_slugify(*args, **kwargs))\n",
    ),
    # the hard-coded table of what the agent can see: the statement's example
    "hard_coded_statement": (
        "textkit/slugs.py",
        "\n_slugify = slugify\n\n\ndef slugify(text, *args, **kwargs):\n"
        "    return 'creme-brulee' if text == 'Crème Brûlée' else _slugify(text, *args, **kwargs)\n",
    ),
    # a hang on the failing inputs: a masked `verifier_timeout` before, a 0 now
    "hang": (
        "textkit/slugs.py",
        "\n_slugify = slugify\n\n\ndef slugify(*args, **kwargs):\n    while True:\n        pass\n",
    ),
    # an expression nested too deeply for a parser: a masked `verifier_error` before, a 0 now
    "nested_too_deep": ("textkit/slugs.py", "\nX = " + "(" * 30_000 + "1" + ")" * 30_000 + "\n"),
    # a source-encoding cookie: a comment to a UTF-8 reader, code to the interpreter
    "utf7_cookie": ("textkit/slugs.py", "# -*- coding: utf-7 -*-\n"),
}


@pytest.mark.timeout(300)
async def test_the_forgeries_that_scored_before_score_0_and_are_never_masked() -> None:
    runner = EnvRunner(SweFix({"test_wall_s": 2.0, "test_timeout_s": 40.0}))
    row = tasks()[0]  # slugify_accents
    broken = apply(pristine_files(), row["patch"], reverse=True)["textkit/slugs.py"]
    cookie = "# -*- coding: utf-7 -*-\n" + broken + "\n# +AAo-import os+AAo-os.+AF8-exit(0)\n"

    async def one(name: str, module: str, text: str) -> tuple[str, dict[str, Any]]:
        edits = {module: cookie if name == "utf7_cookie" else broken + text}
        return name, await verdict_of(runner, row, edits)

    verdicts = dict(await asyncio.gather(*(one(name, *forgery) for name, forgery in FORGERIES.items())))
    for name, verdict in verdicts.items():
        assert verdict["reward"] == 0.0, (name, verdict)
        assert "failure_kind" not in verdict, (name, verdict)
    assert verdicts["hard_coded_statement"]["reward_components"]["FAIL_TO_PASS"] == 0.5, "the visible one passes"
    assert verdicts["hard_coded_statement"]["tests_failed"] == [f"{HELD_OUT}::test_held_out_slugify_accents"]
    hang = verdicts["hang"]  # each test calling the hanging function fails at its deadline; the rest pass
    assert hang["reward_components"]["FAIL_TO_PASS"] == 0.0 and 0.9 < hang["reward_components"]["PASS_TO_PASS"] < 1
    assert all(test.startswith(("tests/test_slugs.py::test_slugify", HELD_OUT)) for test in hang["tests_failed"])


async def test_what_the_agent_cannot_make_a_module_of_is_a_0_naming_why() -> None:
    runner = EnvRunner(SweFix())
    row = tasks()[0]
    too_large = await verdict_of(runner, row, {"textkit/slugs.py": "#" * (300 << 10)})
    assert too_large["reward"] == 0.0 and "at most" in too_large["rejected"], too_large
    state = await runner.seed(row)
    env = runner.env
    assert isinstance(env, SweFix)
    fifo = await env.sandboxes.exec(state["sandbox"], "rm textkit/slugs.py && mkfifo textkit/slugs.py", cwd="repo")
    assert fifo.ok, fifo
    verdict = await asyncio.wait_for(runner.verify(row, {"output": []}, state), 60)  # a FIFO must not hang the read
    assert verdict["reward"] == 0.0 and "textkit/slugs.py" in verdict["rejected"], verdict
    removed = await verdict_of(runner, row, {})
    assert removed["reward"] == 0.0
    await local_provider().close()


class QuickTurns(SweFix):
    tool_turn_budget_s = 3.0


async def test_a_turn_of_commands_that_hang_is_cut_at_the_turn_s_budget_not_a_masked_timeout() -> None:
    """Each `bash` may run 60 s; six in one turn would outlive the Agent's 300 s for the turn's calls, a masked
    `transport_timeout` the policy could buy. The turn's budget cuts the command running at it and answers the rest."""
    runner = EnvRunner(QuickTurns())
    state = await runner.seed(tasks()[0])
    calls = [{"call_id": f"s{i}", "name": "bash", "arguments": json.dumps({"command": "sleep 30"})} for i in range(6)]
    started = asyncio.get_running_loop().time()
    outputs, state = await runner.call_tools(calls, state)
    assert asyncio.get_running_loop().time() - started < 10
    assert "did not finish within" in outputs[0]["output"], outputs[0]
    assert all("not run" in output["output"] for output in outputs[1:]), outputs
    env = runner.env
    assert isinstance(env, SweFix)
    await env.sandboxes.destroy(state["sandbox"])


@pytest.mark.serve
@pytest.mark.timeout(900)
async def test_gym_serve_env_test_passes(serve_instance: None) -> None:
    report = await asyncio.to_thread(check_environment, "swe_fix")
    assert report.ok, report.render()
    assert all(r.right == 1.0 and r.wrong == 0.0 for r in report.rows)


@pytest.mark.serve
@pytest.mark.timeout(900)
async def test_every_reward_hack_scores_0_through_a_serve_replica(serve_instance: None) -> None:
    """Each reward hack (the generated attacks included), played as the Agent tier would: its tool calls through
    the Environment replica's handle, its sandbox in the Sandbox tier, then that replica's verify."""
    name = unique("swe-red-team")
    serve.run(build_app({"environment": {"name": "swe_fix"}}), name=name, route_prefix=None)
    environment = serve.get_deployment_handle("Environment", app_name=name)
    row = tasks()[0]
    hacks = SweFix.reward_hacks(SweFix.Task.model_validate(row))
    slots = asyncio.Semaphore(2)

    async def play(turns: list[list[dict[str, Any]]]) -> float:
        async with slots:
            state = await environment.seed.remote(row)
            output: list[dict[str, Any]] = []
            for turn in turns:
                calls = [item for item in turn if item["type"] == "function_call"]
                if calls:
                    outputs, state = await environment.call_tools.remote(calls, state)
                    output += [*calls, *outputs]
                else:
                    output += turn
            verdict = await environment.verify.remote(row, {"output": output}, state)
            return float(verdict["reward"])

    rewards = dict(zip(hacks, await asyncio.gather(*(play(turns) for turns in hacks.values())), strict=True))
    assert len(rewards) >= 20 and any(name.startswith("generated_") for name in rewards)
    assert {name: reward for name, reward in rewards.items() if reward != 0.0} == {}
    serve.delete(name)
    assert json.dumps(rewards)  # plain data all the way back


async def test_the_generated_reward_hacks_edit_the_broken_module_and_stay_within_the_budget() -> None:
    """`hacks.generated`: every family, each an edit of the module holding the bug that Python compiles (an encoding
    honouring its cookie), few enough that `gym-serve env test` plays them all in a CI run (each is a rollout)."""
    row = tasks()[0]
    found = SweFix.reward_hacks(SweFix.Task.model_validate(row))
    generated = [name for name in found if name.startswith("generated_")]
    assert 60 <= len(generated) <= 120, len(generated)
    assert {name.split("_")[1] for name in generated} == {"route", "encoding", "dunder", "annotation"}
    ((path, text),) = apply(pristine_files(), row["patch"], reverse=True).items()
    for name, content in hacks.generated(path, text).items():
        compile(content, path, "exec")
        if isinstance(content, str) and not name.startswith("encoding"):
            assert content.startswith(text), name  # the module as the agent found it, the attack after
