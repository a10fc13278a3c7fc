"""Write a Python program; the reward runs it against the task's tests in a sandbox.

Rows carry either `tests` (assert statements run after the solution, as in
MBPP/HumanEval-style data) or `cases` (`{"input", "output"}` stdin/stdout
pairs, as in competitive-programming data such as NeMo Gym's code_gen /
LiveCodeBench). The solution is the last fenced code block of the final answer.

Reward: 1.0 when every test passes (0.0 otherwise); `fraction_passed`,
`tests_passed` and `tests_total` are added to the rollout row.
"""

from __future__ import annotations

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.code import SandboxLimits, extract_code, verify_asserts, verify_stdio


class Case(BaseModel):
    input: str
    output: str


class CodeTask(Task):
    tests: list[str] | None = None
    """Assert-style test snippets, run one by one in the solution's namespace."""
    cases: list[Case] | None = None
    """Stdin/stdout cases: the program reads `input` and must print `output`."""


class CodeConfig(BaseModel):
    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512


class CodeGeneration(Environment):
    Task = CodeTask
    verify_budget_s = 15.0  # hostile code runs until the sandbox's wall limit (10 s by default), plus start-up
    Config = CodeConfig

    async def verify(self, task: CodeTask, response: Response, state: None) -> Verdict:
        code = extract_code(response.output_text())
        if code is None:
            return Verdict(reward=0.0, fields={"extracted_code": None, "fraction_passed": 0.0})
        limits = SandboxLimits(cpu_s=self.config.cpu_s, wall_s=self.config.wall_s, memory_mb=self.config.memory_mb)
        if task.cases:
            result = await verify_stdio(code, [c.model_dump() for c in task.cases], limits=limits)
        else:
            result = await verify_asserts(code, task.tests or [], limits=limits)
        return Verdict(
            reward=result.reward,
            components={"fraction_passed": result.fraction},
            fields={
                "extracted_code": code,
                "fraction_passed": result.fraction,
                "tests_passed": result.passed,
                "tests_total": result.total,
            },
        )
