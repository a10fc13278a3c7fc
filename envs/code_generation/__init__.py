"""Write a Python program; the reward runs it against the task's tests in a sandbox it cannot game.

Rows carry their tests in one of these fields (a row with none is bad input, never a 0):

- `tests`: assert snippets (MBPP/HumanEval style), run one by one against the solution;
- `cases`: `{"input", "output"}` stdin/stdout pairs;
- `verifier_metadata.unit_tests` (NeMo Gym's `code_gen`, LiveCodeBench): `inputs`/`outputs`, plain or
  `packed` (base64 of zlib of their JSON), with `fn_name` for call-based tests (each input line one
  JSON argument, the output JSON); scored with LiveCodeBench's rules and imports, as NeMo Gym does;
- `verifier_metadata.test`: test code (asserts, or unittest `TestCase`s, which are run).

The solution is the code between the last two ``` lines of the final answer (NeMo Gym's rule).
An answer whose final text holds a `<think>` tag scores 0 (NeMo Gym's `reasoning_format_penalty`).
Reward: 1.0 when every test passes, else 0.0; `fraction_passed`, `tests_passed`, `tests_total`,
`extracted_code` and the sandbox's `sandbox_layers` are added to the rollout row. A sandbox
that gives no verdict fails the rollout (`verifier_error`, or `verifier_timeout` if it stalled).
A failure to import a package the task itself imports (in its tests, or in the code its prompt
starts from: BigCodeBench's `pandas`, `wordcloud`) and the sandbox's Python lacks fails the rollout
as `missing_package`, naming it: no answer could be scored there. A package only the solution
chose to import is the solution's failure (0).
"""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import re
import zlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.errors import MissingPackageError, VerifierTimeoutError, VerifyError
from gym_serve.sandbox import host
from gym_serve.sandbox.judge import TEST_MODULES
from gym_serve.verifiers import attacks
from gym_serve.verifiers import code as sandbox
from gym_serve.verifiers.code import SandboxLimits, extract_code
from gym_serve.wire.pieces import assistant_message

LCB_PRELUDE = "\n".join(
    [f"from {m} import *" for m in "string re datetime collections heapq bisect copy math random statistics".split()]
    + [f"from {m} import *" for m in "itertools functools operator io sys json builtins typing".split()]
    + [f"import {m}" for m in "string re datetime collections heapq bisect copy math random statistics".split()]
    + [f"import {m}" for m in "itertools functools operator io sys json".split()]
    + ["sys.setrecursionlimit(50000)", "sys.set_int_max_str_digits(1 << 20)", ""]
)
"""The imports LiveCodeBench (and so NeMo Gym's `code_gen`) puts before a solution: `List`, `sqrt`, `deque`..."""


class Case(BaseModel):
    input: str
    output: str


class UnitTests(BaseModel):
    """NeMo Gym's (LiveCodeBench's) tests."""

    inputs: list[str]
    outputs: list[str]
    fn_name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _unpack(cls, data: Any) -> Any:
        if isinstance(data, dict) and "packed" in data:
            unpacked = json.loads(zlib.decompress(base64.b64decode(data["packed"])))
            return {"inputs": unpacked["inputs"], "outputs": unpacked["outputs"], "fn_name": data.get("fn_name")}
        return data

    @model_validator(mode="after")
    def _paired(self) -> UnitTests:
        if len(self.inputs) != len(self.outputs):
            raise ValueError(f"`unit_tests` has {len(self.inputs)} inputs but {len(self.outputs)} outputs")
        return self


class CodeTask(Task):
    tests: list[str] | None = None
    """Assert-style test snippets, run one by one against the solution."""
    cases: list[Case] | None = None
    """Stdin/stdout cases: the program reads `input` and must print `output`."""
    unit_tests: UnitTests | None = None
    """NeMo Gym's `verifier_metadata.unit_tests` (lifted from there)."""

    @model_validator(mode="before")
    @classmethod
    def _lift_verifier_metadata(cls, data: Any) -> Any:
        meta = data.get("verifier_metadata") if isinstance(data, dict) else None
        if not isinstance(meta, dict):
            return data
        lifted = dict(data)
        if meta.get("unit_tests") is not None and "unit_tests" not in data:
            lifted["unit_tests"] = meta["unit_tests"]
        if isinstance(meta.get("test"), str) and meta["test"].strip() and not data.get("tests"):
            lifted["tests"] = [meta["test"]]
        return lifted

    @model_validator(mode="after")
    def _has_tests(self) -> CodeTask:
        if not (self.tests or self.cases or (self.unit_tests and self.unit_tests.inputs)):
            raise ValueError(
                "the row has no tests: give `tests`, `cases`, or `verifier_metadata.unit_tests` / "
                "`verifier_metadata.test` (a row without tests cannot score anything)"
            )
        return self


class CodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512
    disk_mb: int = 64
    isolation: Literal["namespaces", "fallback"] | None = None
    """Force an isolation mode (default: namespaces where the kernel allows them)."""


class CodeGeneration(Environment[CodeTask, None]):
    Config = CodeConfig
    verify_budget_s = 15.0  # hostile code runs until the sandbox's wall limit (10 s by default), plus start-up
    verify_timeout_s = 900.0  # the sandbox bounds itself: (wall_s + 1) per test, plus start-up

    @classmethod
    def reward_hacks(cls, task: CodeTask) -> dict[str, list[list[dict[str, Any]]]]:
        """The generated attacks on a verdict (`gym_serve.verifiers.attacks`), each as the answer's code beside a
        wrong definition of every function the tests call: every route from the modules the harness hands its tests
        to `sys`, `os`, `builtins`, `inspect`, `gc` or a frame, with a payload that forges every verdict it can; one
        source per family of encodings; objects that lie to every comparison; code run by string annotations."""
        names = _called(task.tests or [])
        stub = "".join(f"def {name}(*args, **kwargs):\n    return None\n\n\n" for name in names)
        solutions = attacks.solutions(
            TEST_MODULES, stub, names, python=host.sandbox_python(), spellings=("attrgetter",)
        )
        return {
            f"generated_{name}": [[assistant_message(f"```python\n{source}\n```", "done")]]
            for name, source in solutions.items()
        }

    async def verify(self, task: CodeTask, response: Response) -> Verdict:
        text = response.output_text()
        code = extract_code(text) if text.strip() else None
        if code is None or not code.strip():
            return Verdict(reward=0.0, fields={"extracted_code": code, "fraction_passed": 0.0})
        if "<think>" in text or "</think>" in text:
            return Verdict(reward=0.0, fields={"extracted_code": code, "reasoning_format_violation": True})
        try:
            result = await self._run(task, code)
        except sandbox.SandboxTimeout as e:
            raise VerifierTimeoutError(f"code_generation: {e}") from e
        except sandbox.SandboxError as e:
            raise VerifyError(f"code_generation: {e}") from e
        if result.reward < 1.0:
            await _scorable(task, result)
        return Verdict(
            reward=result.reward,
            components={"fraction_passed": result.fraction},
            fields={
                "extracted_code": code,
                "fraction_passed": result.fraction,
                "tests_passed": result.passed,
                "tests_total": result.total,
                "sandbox_layers": result.layers,
            },
        )

    async def _run(self, task: CodeTask, code: str) -> sandbox.CodeResult:
        config = self.config
        limits = SandboxLimits(
            cpu_s=config.cpu_s, wall_s=config.wall_s, memory_mb=config.memory_mb, disk_mb=config.disk_mb
        )
        mode = config.isolation
        if task.unit_tests is not None and task.unit_tests.inputs:
            tests = task.unit_tests
            if tests.fn_name is None:
                cases = [{"input": i, "output": o} for i, o in zip(tests.inputs, tests.outputs, strict=True)]
                return await sandbox.verify_stdio(LCB_PRELUDE + code, cases, limits=limits, mode=mode)
            calls = [
                ([json.loads(line) for line in i.split("\n")], json.loads(o))
                for i, o in zip(tests.inputs, tests.outputs, strict=True)
            ]
            return await sandbox.verify_calls(LCB_PRELUDE + code, tests.fn_name, calls, limits=limits, mode=mode)
        if task.cases:
            return await sandbox.verify_stdio(code, [c.model_dump() for c in task.cases], limits=limits, mode=mode)
        return await sandbox.verify_asserts(code, task.tests or [], limits=limits, mode=mode)


_PROMPT_IMPORT = re.compile(r"^[ \t>]*(?:from[ \t]+([A-Za-z_]\w*)[\w.]*[ \t]+import|import[ \t]+([A-Za-z_]\w*))", re.M)


def task_modules(task: CodeTask) -> set[str]:
    """The top-level modules the task itself imports: in its tests, and in code its prompt gives."""
    names = {a or b for a, b in _PROMPT_IMPORT.findall(task.prompt_text())}
    for source in task.tests or []:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def _called(tests: list[str]) -> list[str]:
    """The names the tests call that no builtin has (the functions a solution is asked for)."""
    import builtins

    called = set()
    for test in tests:
        for node in ast.walk(ast.parse(test)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not hasattr(builtins, node.func.id):
                called.add(node.func.id)
    return sorted(called)


async def _scorable(task: CodeTask, result: sandbox.CodeResult) -> None:
    """Raise `MissingPackageError` when the failure is a package the task needs and the sandbox lacks."""
    needed = sorted(set(result.missing_modules) & task_modules(task))
    lacking = await asyncio.to_thread(sandbox.sandbox_lacks, needed) if needed else []
    if lacking:
        names = ", ".join(f"`{name}`" for name in lacking)
        raise MissingPackageError(
            f"code_generation: the task imports {names}, which the sandbox's Python lacks; no answer can be scored "
            "here (install it for the interpreter the sandbox runs, or leave such rows out)"
        )
