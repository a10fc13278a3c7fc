"""swe_fix: fix a bug in a small Python library, in a sandbox of your own, as in SWE-bench and SWE-smith.

Description:
    Each task breaks one function of `textkit` (a small library shipped in `repo/`, with its own test
    suite) in SWE-smith's manner (`bugs.py`) and gives its problem statement, as a user would report
    it. The agent works in a sandbox (`WorkspaceEnvironment`): the library at `/workspace/repo` (a
    git repository whose only commit is the broken state, without the tests the bug fails), a Python
    environment at `/workspace/.venv`, and the `bash` and `str_replace_editor` tools.

Task:
    SWE-bench's row fields (`instance_id`, `repo`, `base_commit`, `patch`: the gold fix,
    `test_patch`: the tests verify adds, `problem_statement`, `hints_text`, `created_at`, `version`,
    `FAIL_TO_PASS`, `PASS_TO_PASS`, `environment_setup_commit`) and SWE-smith's `image_name`. The
    starting state is the pristine repository with `patch` and `test_patch` applied in reverse.

Reward:
    1.0 when every FAIL_TO_PASS and PASS_TO_PASS test passes, else 0.0. The verdict is decided where
    the agent's code never runs (`gym_serve.sandbox.judge.run_pytest`): `verify` ends what the rollout
    left running, reads the library's modules out of the sandbox as bytes, and runs the task's tests
    (the pristine suite with `test_patch`: the failing tests and held-out ones the agent never saw,
    taken from this package, never from the workspace) under pytest in a trusted harness, the library
    living in a confined runner that answers calls with plain data. A hang, a crash, a huge answer or
    a library that does not import fails the tests it touches: a 0, never a masked failure.

Version History:
    v1: 25 tasks over textkit 1.4.0.
    v2: the verdict moved out of the agent's process (trusted harness, confined runner); the failing
        tests held out of the workspace, with held-out tests of other inputs (`test_patch`).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_serve import Response, Task, Verdict
from gym_serve.environment.workspace import Workspace, WorkspaceEnvironment, workspace_errors
from gym_serve.envs.swe_fix import hacks
from gym_serve.envs.swe_fix.patches import apply, make_patch
from gym_serve.errors import VerifierTimeoutError, VerifyError
from gym_serve.sandbox import (
    Base,
    BaseFile,
    FileTooLarge,
    Limits,
    NotAFile,
    PathOutsideWorkspace,
    SandboxError,
    SandboxFileNotFound,
    host,
)
from gym_serve.sandbox.judge import TEST_LIB, SandboxLimits, SandboxTimeout, pytest_sources, run_pytest

__all__ = ["FixTask", "SweFix"]

REPO = Path(__file__).parent / "repo"
LIBRARY = "textkit"
WORKSPACE_REPO = "repo"
"""The repository's folder in the workspace (`/workspace/repo`)."""
MAX_MODULE_BYTES = 256 << 10
MAX_MODULES = 64
"""What `verify` takes of the library: its `.py` files, each at most this large (a fix needs a few kB)."""


class FixTask(Task):
    """A bug to fix, in SWE-bench's row fields."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    """The gold fix: the starting state is the pristine library with it applied in reverse."""
    test_patch: str
    """The tests `verify` adds to the pristine suite: the task's failing tests (taken out of the agent's copy) and a
    file of held-out tests (other inputs of the same behaviour)."""
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
    model_config = ConfigDict(extra="forbid")

    test_timeout_s: float = Field(default=60.0, gt=0, description="The budget of the verify's whole test run.")
    test_wall_s: float = Field(default=10.0, gt=0, description="The deadline of one test's calls into the library.")
    isolation: Literal["namespaces", "fallback"] | None = None
    """Force the test run's isolation mode (default: namespaces where the kernel allows them)."""


class SweFix(WorkspaceEnvironment[FixTask, FixState]):
    """Fix a bug in `textkit` from its problem statement (see the module docstring)."""

    Config = FixConfig
    verify_timeout_s: float = 300.0
    verify_budget_s: ClassVar[float] = 60.0
    """A verify runs the repository's test suite in a one-shot sandbox: about a second on a quiet 2-core machine,
    tens of seconds with rollouts beside it on a loaded one."""
    limits: ClassVar[Limits] = Limits(cpu_s=60, memory_mb=1024, disk_mb=256, wall_s=60.0, output_bytes=64 << 10)

    def base_for(self, task: FixTask) -> Base:
        return base()

    @classmethod
    def reward_hacks(cls, task: FixTask) -> dict[str, list[list[dict[str, Any]]]]:
        ((path, text),) = apply(pristine_files(), task.patch, reverse=True).items()  # the broken module
        return hacks.hacks(task.FAIL_TO_PASS, host.python_version(), broken=(path, text))

    async def reset(self, task: FixTask) -> FixState:
        """The task's starting state: the library with the bug, the tests without the ones `verify` adds, one commit,
        no history."""
        sandbox = await self.open_workspace(task)
        state = FixState(sandbox=sandbox)
        with workspace_errors(f"`{type(self).name()}`: preparing the task"):
            for path, text in starting_files(task).items():
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
        await self.sandboxes.kill_all(state.sandbox)  # what the rollout left running can change nothing from here on
        library = await self._library(state.sandbox)
        if isinstance(library, str):
            return _zero(library)
        model_patch = _diff(library)
        tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        config = self.config
        limits = SandboxLimits(
            cpu_s=int(config.test_wall_s) + 1, wall_s=config.test_wall_s, budget_s=config.test_timeout_s, memory_mb=512
        )
        try:
            result = await run_pytest(
                LIBRARY,
                library,
                held_tests(task),
                tests,
                config="pyproject.toml",
                limits=limits,
                mode=config.isolation,
            )
        except SandboxTimeout as e:
            raise VerifierTimeoutError(f"`{type(self).name()}`: {e}") from e
        except SandboxError as e:
            raise VerifyError(f"`{type(self).name()}`: {e}") from e
        if "harness_error" in result:
            if not result.get("solution_ran"):  # it broke before any of the library ran: ours to fix
                raise VerifyError(f"`{type(self).name()}`: the test harness failed: {result['harness_error']}")
            return _zero(f"the test run broke: {result['harness_error']}", model_patch)
        if result["collection_errors"] and result["collected_untouched"]:
            raise VerifyError(f"`{type(self).name()}`: the task's tests do not collect: {result['collection_errors']}")
        outcomes = {test: result["outcomes"].get(test, "missing") for test in tests}
        failed = [test for test, outcome in outcomes.items() if outcome != "passed"]
        return Verdict(
            reward=0.0 if failed else 1.0,
            components={
                "FAIL_TO_PASS": _share(outcomes, task.FAIL_TO_PASS),
                "PASS_TO_PASS": _share(outcomes, task.PASS_TO_PASS),
            },
            fields={
                "tests_failed": failed[:20],  # ids only: what a held-out test checks stays out of the rollout
                "model_patch": model_patch,
            },
        )

    async def _library(self, sandbox: str) -> dict[str, bytes] | str:
        """The library's `.py` files as the agent left them, as bytes (none of it runs here), or why they cannot be
        taken (a 0: the agent made it so)."""
        try:
            entries = await self.sandboxes.list_files(sandbox, f"{WORKSPACE_REPO}/{LIBRARY}")
        except _UNREADABLE as e:
            return f"the library's folder cannot be read: {e}"
        modules = [e for e in entries if e.name.endswith(".py") and e.kind in ("file", "link")]
        if len(modules) > MAX_MODULES:
            return f"the library holds {len(modules)} modules; at most {MAX_MODULES} are taken"
        library = {}
        for entry in modules:
            path = f"{LIBRARY}/{entry.name}"
            if entry.size > MAX_MODULE_BYTES:
                return f"`{path}` is {entry.size} bytes; a module may hold at most {MAX_MODULE_BYTES}"
            try:
                library[path] = await self.sandboxes.read_file(sandbox, f"{WORKSPACE_REPO}/{path}")
            except _UNREADABLE as e:
                return f"`{path}` cannot be read as a module: {e}"
            if len(library[path]) > MAX_MODULE_BYTES:
                return f"`{path}` is larger than {MAX_MODULE_BYTES} bytes"
        return library


_UNREADABLE = (SandboxFileNotFound, NotAFile, PathOutsideWorkspace, FileTooLarge)
"""What the agent can make of a module (gone, a folder or a FIFO, a link out of the workspace, too large); a sandbox
that is gone (`SandboxGone`) is not among them: that is the system's failure."""


def _zero(reason: str, model_patch: str = "") -> Verdict:
    return Verdict(reward=0.0, fields={"tests_failed": [], "rejected": reason, "model_patch": model_patch})


def _share(outcomes: dict[str, str], tests: list[str]) -> float:
    return sum(outcomes[test] == "passed" for test in tests) / max(1, len(tests))


def _diff(library: dict[str, bytes]) -> str:
    """The library's changes, as a diff (a module that is not UTF-8 is shown with replacement characters)."""
    pristine = {path: text for path, text in pristine_files().items() if _in_library(path)}
    texts = {path: data.decode(errors="replace") for path, data in library.items()}
    patches = [make_patch(p, pristine.get(p), texts[p]) for p in sorted(texts) if texts[p] != pristine.get(p)]
    patches += [make_patch(p, pristine[p], "") for p in sorted(pristine) if p not in texts]  # deleted
    return "".join(patches)


def _in_library(path: str) -> bool:
    return path.startswith(f"{LIBRARY}/")


def starting_files(task: FixTask) -> dict[str, str]:
    """What a task changes of the pristine repository for its starting state: the bug in (`patch` undone) and the
    tests `verify` adds out (`test_patch` undone)."""
    pristine = pristine_files()
    return {**apply(pristine, task.patch, reverse=True), **apply(pristine, task.test_patch, reverse=True)}


def held_tests(task: FixTask) -> dict[str, str]:
    """The tests `verify` runs, and pytest's config: the pristine suite with the task's `test_patch` (its failing
    tests, and its held-out tests), from this package, never from the workspace."""
    pristine = {path: text for path, text in pristine_files().items() if not _in_library(path)}
    visible = apply(pristine, task.test_patch, reverse=True)
    return {**pristine, **apply({**pristine, **visible}, task.test_patch)}


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
    """The sandbox's base: the pristine repository and a Python environment (a venv whose packages are pytest and
    what it imports, bound read-only at `TEST_LIB`, for the agent's own test runs)."""
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
        BaseFile(dest=f"{site}/gs-judge.pth", text=f"{TEST_LIB}\n"),
    ]
    binds = tuple((source, f"{TEST_LIB}/{os.path.basename(source)}") for source in pytest_sources())
    env = (("PATH", "/workspace/.venv/bin:/usr/local/bin:/usr/bin:/bin"), ("VIRTUAL_ENV", "/workspace/.venv"))
    return Base(files=tuple(files), binds=binds, env=env, name="textkit-1.4.0")
