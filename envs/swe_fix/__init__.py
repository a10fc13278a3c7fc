"""swe_fix: fix a bug in a small Python library, in a sandbox of your own, as in SWE-bench and SWE-smith.

Description:
    Each task breaks one function of `textkit` (a small library shipped in `repo/`, with its own test
    suite) in SWE-smith's manner (`bugs.py`) and gives its problem statement, as a user would report
    it. The agent works in a sandbox (`WorkspaceEnvironment`): the library at `/workspace/repo` (a
    git repository whose only commit is the broken state), a Python environment at
    `/workspace/.venv`, and the `bash` and `str_replace_editor` tools.

Task:
    SWE-bench's row fields (`instance_id`, `repo`, `base_commit`, `patch`: the gold fix,
    `test_patch`, `problem_statement`, `hints_text`, `created_at`, `version`, `FAIL_TO_PASS`,
    `PASS_TO_PASS`, `environment_setup_commit`) and SWE-smith's `image_name`. The starting state is
    the pristine library with `patch` applied in reverse.

Reward:
    1.0 when every FAIL_TO_PASS and PASS_TO_PASS test passes, else 0.0. `verify` first ends every
    process the rollout left running, puts back the pristine repository around the library's own
    modules (the tests, `conftest.py`, the config; anything added is deleted, `__pycache__` too),
    checks the changed modules statically (`patch_check`), and runs the tests with a trusted runner
    the workspace cannot change (`judge`). A test run past its deadline is a `verifier_timeout`
    failure (masked), never a 0.

Version History:
    v1: 25 tasks over textkit 1.4.0.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from gym_serve import Response, Task, Verdict
from gym_serve.environment.workspace import Workspace, WorkspaceEnvironment, workspace_errors
from gym_serve.envs.swe_fix import hacks, judge, patch_check, restore
from gym_serve.envs.swe_fix.patches import apply
from gym_serve.errors import VerifierTimeoutError
from gym_serve.sandbox import Base, BaseFile, Limits, PathOutsideWorkspace, SandboxFileNotFound, host

__all__ = ["FixTask", "SweFix"]

REPO = Path(__file__).parent / "repo"
LIBRARY = "textkit"
WORKSPACE_REPO = "repo"
"""The repository's folder in the workspace (`/workspace/repo`)."""


class FixTask(Task):
    """A bug to fix, in SWE-bench's row fields."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    """The gold fix: the starting state is the pristine library with it applied in reverse."""
    test_patch: str = ""
    problem_statement: str
    hints_text: str = ""
    created_at: str = ""
    version: str = ""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    environment_setup_commit: str = ""
    image_name: str = ""


class FixState(Workspace):
    """The rollout's sandbox (and the editor's undo history)."""


class FixConfig(BaseModel):
    test_timeout_s: float = Field(default=60.0, gt=0, description="Deadline of the verify's test run.")


class SweFix(WorkspaceEnvironment[FixTask, FixState]):
    """Fix a bug in `textkit` from its problem statement (see the module docstring)."""

    Config = FixConfig
    verify_timeout_s: float = 300.0
    verify_budget_s: ClassVar[float] = 60.0
    """A verify runs the repository's test suite in the rollout's sandbox: about a second on a quiet 2-core machine,
    tens of seconds with rollouts beside it on a loaded one."""
    limits: ClassVar[Limits] = Limits(cpu_s=60, memory_mb=1024, disk_mb=256, wall_s=60.0, output_bytes=64 << 10)

    def base_for(self, task: FixTask) -> Base:
        return base()

    @classmethod
    def reward_hacks(cls, task: FixTask) -> dict[str, list[list[dict[str, Any]]]]:
        return hacks.hacks(task.FAIL_TO_PASS, host.python_version())

    async def reset(self, task: FixTask) -> FixState:
        """The task's starting state: the library with the bug (the gold patch undone), one commit, no history."""
        sandbox = await self.open_workspace(task)
        state = FixState(sandbox=sandbox)
        with workspace_errors(f"`{type(self).name()}`: preparing the task"):
            for path, text in apply(pristine_files(), task.patch, reverse=True).items():
                await self.sandboxes.write_file(sandbox, f"{WORKSPACE_REPO}/{path}", text.encode())
            commit = "git init -q && git add -A && git -c user.name=textkit -c user.email=dev@textkit.invalid "
            commit += f"commit -qm '{task.instance_id}'"
            done = await self.sandboxes.exec(sandbox, commit, cwd=WORKSPACE_REPO, timeout_s=60)
        if not done.ok:
            raise RuntimeError(f"git could not commit the task's starting state: {done.stderr[-500:]}")
        return state

    async def verify(self, task: FixTask, response: Response, state: FixState) -> Verdict:
        try:
            with workspace_errors(f"`{type(self).name()}`: verifying"):
                return await self._judge(task, state)
        finally:
            await self.close_workspace(state)

    async def _judge(self, task: FixTask, state: FixState) -> Verdict:
        sandboxes, sandbox = self.sandboxes, state.sandbox
        await sandboxes.kill_all(sandbox)  # what the rollout left running can change nothing from here on
        library = await self._restore(sandbox)
        if library is None:
            return _zero("the repository could not be put back (it is not where it was, or its library is too large)")
        pristine = pristine_files()
        found = [p for path, text in library.items() for p in patch_check.problems(path, pristine[path], text)]
        model_patch = _diff(library)
        if found:
            return _zero("the changed code breaks the rules: " + "; ".join(found), model_patch=model_patch)
        tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        nonce, stdin = judge.stdin_for(tests)
        command = [host.sandbox_python(), "-I", "-S", "-B", "-c", judge.SOURCE]
        timeout = self.config.test_timeout_s
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        run = await sandboxes.exec(sandbox, command, timeout_s=timeout, stdin=stdin, cwd=WORKSPACE_REPO, env=env)
        if run.timed_out or run.signal == 24:  # the wall deadline, or the CPU one (SIGXCPU)
            raise VerifierTimeoutError(f"the tests did not finish within {timeout:g} s")
        verdict = judge.read_verdict(run.stdout, nonce, tests)
        if verdict is None:
            return _zero(f"the test run gave no verdict (exit {run.exit_code}, signal {run.signal})", model_patch)
        failed = verdict.failed
        fail_to_pass = sum(verdict.outcomes[t] == "passed" for t in task.FAIL_TO_PASS)
        pass_to_pass = sum(verdict.outcomes[t] == "passed" for t in task.PASS_TO_PASS)
        return Verdict(
            reward=0.0 if failed else 1.0,
            components={
                "FAIL_TO_PASS": fail_to_pass / max(1, len(task.FAIL_TO_PASS)),
                "PASS_TO_PASS": pass_to_pass / max(1, len(task.PASS_TO_PASS)),
            },
            fields={"tests_failed": failed[:20], "model_patch": model_patch},
        )

    async def _restore(self, sandbox: str) -> dict[str, str] | None:
        """Put back everything of the pristine repository but the library's modules (`restore.SOURCE`, in one
        command); the modules as the agent left them (a deleted one missing), or None when that failed."""
        pristine = pristine_files()
        library = sorted(p for p in pristine if p.startswith(f"{LIBRARY}/"))
        job = {
            "package": LIBRARY,
            "library": library,
            "restore": {p: t for p, t in pristine.items() if p not in library},
        }
        command = [host.sandbox_python(), "-I", "-S", "-B", "-c", restore.SOURCE]
        try:
            run = await self.sandboxes.exec(sandbox, command, stdin=json.dumps(job).encode(), cwd=WORKSPACE_REPO)
        except (PathOutsideWorkspace, SandboxFileNotFound):
            return None
        return restore.read_library(run.stdout, library) if run.ok and not run.truncated else None


def _zero(reason: str, model_patch: str = "") -> Verdict:
    return Verdict(reward=0.0, fields={"tests_failed": [], "rejected": reason, "model_patch": model_patch})


def _diff(library: dict[str, str]) -> str:
    from gym_serve.envs.swe_fix.patches import make_patch

    pristine = pristine_files()
    return "".join(
        make_patch(path, pristine[path], text) for path, text in sorted(library.items()) if text != pristine[path]
    )


@lru_cache(maxsize=1)
def pristine_files() -> dict[str, str]:
    """The pristine repository's text files, by path (`textkit/slugs.py`, `tests/test_slugs.py`, ...)."""
    files = {}
    for path in sorted(REPO.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(REPO).as_posix()] = path.read_text()
    return files


def repo_commit() -> str:
    """A stable id of the pristine repository's content (what a row's `base_commit` names)."""
    digest = hashlib.sha1()
    for path, text in pristine_files().items():
        digest.update(path.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def base() -> Base:
    """The sandbox's base: the pristine repository and a Python environment (a venv whose packages are the
    judge's pytest, bound read-only at `judge.JUDGE_LIB`)."""
    python = host.sandbox_python()
    version = host.python_version()
    site = f".venv/lib/python{version}/site-packages"
    files = [BaseFile(dest=f"{WORKSPACE_REPO}/{path}", text=text) for path, text in pristine_files().items()]
    files += [
        BaseFile(
            dest=".venv/pyvenv.cfg", text=f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n"
        ),
        BaseFile(dest=".venv/bin/python", symlink=python),
        BaseFile(dest=".venv/bin/python3", symlink=python),
        BaseFile(dest=f"{site}/gs-judge.pth", text=f"{judge.JUDGE_LIB}\n"),
    ]
    binds = tuple((source, f"{judge.JUDGE_LIB}/{os.path.basename(source)}") for source in _judged_packages())
    env = (("PATH", "/workspace/.venv/bin:/usr/local/bin:/usr/bin:/bin"), ("VIRTUAL_ENV", "/workspace/.venv"))
    return Base(files=tuple(files), binds=binds, env=env, name="textkit-1.4.0")


def _judged_packages() -> list[str]:
    """Where pytest and what it imports are installed here (a package's folder, or a module's file)."""
    found = []
    for name in judge.JUDGED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        locations = spec.submodule_search_locations
        found.append(list(locations)[0] if locations else spec.origin)
    return found
