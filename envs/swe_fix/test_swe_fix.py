"""swe_fix: its tasks are SWE-bench rows over a library that passes its own suite; each task's bug fails exactly its
FAIL_TO_PASS tests and its gold patch passes them all; a test run past its deadline is a `verifier_timeout`; and
`gym-serve env test swe_fix` passes (its non-answers and reward hacks at 0, its recordings through real Serve)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gym_serve.analysis.check import check_environment
from gym_serve.environment.runner import EnvRunner
from gym_serve.environment.workspace import local_provider
from gym_serve.envs.swe_fix import SweFix, base, judge, pristine_files
from gym_serve.envs.swe_fix.patches import apply
from gym_serve.errors import FailureKind, VerifierTimeoutError, failure_kind
from gym_serve.sandbox import host
from gym_serve.wire.jsonl import read_jsonl

pytestmark = pytest.mark.asyncio(loop_scope="module")

SWE_BENCH_FIELDS = {
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "hints_text", "created_at",
    "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
}  # fmt: skip


def tasks() -> list[dict[str, Any]]:
    return [row for _, row in read_jsonl(SweFix.data_dir() / "tasks.jsonl")]


async def test_tasks_are_swe_bench_rows_whose_gold_patch_undoes_one_bug() -> None:
    rows = tasks()
    assert len(rows) >= 20 and len({r["instance_id"] for r in rows}) == len(rows)
    library = {path: text for path, text in pristine_files().items() if path.startswith("textkit/")}
    for row in rows:
        assert SWE_BENCH_FIELDS <= set(row), row["instance_id"]
        assert row["FAIL_TO_PASS"] and row["PASS_TO_PASS"] and not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        buggy = apply(library, row["patch"], reverse=True)
        assert len(buggy) == 1 and all(buggy[path] != library[path] for path in buggy), "one module, changed"
        assert apply({**library, **buggy}, row["patch"]) == {p: library[p] for p in buggy}, "the patch undoes it"
    examples = [row for _, row in read_jsonl(SweFix.data_dir() / "example.jsonl")]
    assert [r["instance_id"] for r in examples] == [r["instance_id"] for r in rows[: len(examples)]]


async def test_the_pristine_library_passes_its_whole_suite_in_a_sandbox() -> None:
    provider = local_provider()
    sandbox = await provider.create(base(), limits=SweFix.limits)
    tests = sorted(p for p in pristine_files() if p.startswith("tests/test_"))
    nonce, stdin = judge.stdin_for(tests)
    command = [host.sandbox_python(), "-I", "-S", "-B", "-c", judge.SOURCE]
    run = await provider.exec(
        sandbox, command, stdin=stdin, cwd="repo", env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, timeout_s=120
    )
    verdict = judge.read_verdict(run.stdout, nonce, tests)
    assert verdict is not None and not verdict.collection_failed, run
    line = next(x for x in run.stdout.splitlines() if x.startswith(f"{judge.MARK} {nonce}"))
    outcomes = set(__import__("json").loads(line.split(" ", 2)[2])["outcomes"].values())
    assert outcomes == {"passed"}
    await provider.destroy(sandbox)


async def verdict_of(runner: EnvRunner, row: dict[str, Any], edits: dict[str, str]) -> dict[str, Any]:
    """A rollout of `row` that writes `edits` into the repository and answers, verified."""
    state = await runner.seed(row)
    env = runner.env
    assert isinstance(env, SweFix)
    for path, text in edits.items():
        await env.sandboxes.write_file(state["sandbox"], f"repo/{path}", text.encode())
    return await runner.verify(row, {"output": []}, state)


GOLD_CHECKED = 5
"""Tasks whose gold fix is also verified through the sandbox: for every task, the gold patch restores the pristine
library exactly (the first test) and the pristine library passes its whole suite (the second), so a few suffice."""


@pytest.mark.slow
@pytest.mark.timeout(600)  # 25 + 5 test-suite runs in sandboxes: ~2 min on a quiet 2-core machine, more on a busy one
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


async def test_a_test_run_past_its_deadline_is_a_verifier_timeout_never_a_zero() -> None:
    runner = EnvRunner(SweFix({"test_timeout_s": 3}))
    row = tasks()[0]
    module = next(iter(apply(pristine_files(), row["patch"], reverse=True)))
    hang = pristine_files()[module] + "\nwhile True:\n    pass\n"  # no forbidden name: the deadline must catch it
    with pytest.raises(VerifierTimeoutError) as timed_out:
        await verdict_of(runner, row, {module: hang})
    assert failure_kind(timed_out.value) is FailureKind.VERIFIER_TIMEOUT


@pytest.mark.serve
@pytest.mark.timeout(900)
async def test_gym_serve_env_test_passes(serve_instance: None) -> None:
    report = await asyncio.to_thread(check_environment, "swe_fix")
    assert report.ok, report.render()
    assert all(r.right == 1.0 and r.wrong == 0.0 for r in report.rows)
