"""Math word problems with a Python tool: compute step by step, then answer.

Rows carry `expected_answer` (a number) in NeMo Gym's math format. The model
may call `python(code)`, which runs the code in the code verifier's sandbox
(no network, limits, throwaway dir) and returns what it printed; it can call
it several times before answering.

Reward: 1.0 when the number in the final answer's last `\\boxed{}` equals `expected_answer` (fractions allowed,
relative tolerance 1e-6), else 0.0. `extracted_answer` and `tool_calls` are
added to the rollout row.

A run may take `LIMITS.wall_s` (10 s), and a turn may hold any number of calls, which run
one after another: thirty `while True: pass` in one turn would outlast the agent's deadline
for the turn's tool calls (300 s by default) and fail the rollout as `transport_timeout`,
a masked row the policy's own calls bought. So a rollout's runs share `PYTHON_BUDGET_S` of
wall time; a call past it is not run, and its output says so.
"""

from __future__ import annotations

import re
import time
from fractions import Fraction

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, Verdict, tool
from gym_serve.verifiers.code import SandboxLimits, run_python

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?"
LIMITS = SandboxLimits(cpu_s=5, wall_s=10.0, memory_mb=512, output_bytes=16_000)


PYTHON_BUDGET_S = 120.0
"""Wall time of all of a rollout's python runs (well within the agent's 300 s for one turn's tool calls)."""


class MathTask(Task):
    expected_answer: str


class Spent(BaseModel):
    python_s: float = 0.0
    """Wall time the rollout's python runs took so far."""


def extract_number(text: str) -> str | None:
    """The number in the last `\\boxed{}`; no box, no answer (the last number of the text could be the question's)."""
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    numbers = re.findall(_NUMBER, boxed[-1]) if boxed else []
    return numbers[-1].replace(",", "") if numbers else None


def same_number(a: str, b: str) -> bool:
    try:
        x, y = Fraction(a.replace(",", "")), Fraction(b.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return False
    return x == y or abs(x - y) <= abs(y) * Fraction(1, 10**6)


class MathWithTools(Environment[MathTask, Spent]):
    async def reset(self, task: MathTask) -> Spent:
        return Spent()

    @tool
    async def python(self, state: Spent, code: str) -> str:
        """Run Python code in a sandbox and return what it prints (stdout, then any error).

        Args:
            code: A complete Python program; print the values you need.
        """
        if state.python_s >= PYTHON_BUDGET_S:
            return f"Error: not run: this conversation's python runs have used their {PYTHON_BUDGET_S:g} s."
        started = time.monotonic()
        try:
            run = await run_python(code, limits=LIMITS)
        finally:
            state.python_s += time.monotonic() - started
        out = run.stdout
        if run.timed_out:
            out += "\n[timed out]"
        elif run.exit_code != 0:
            out += "\n" + (run.stderr.strip().splitlines() or [f"exit code {run.exit_code}"])[-1]
        return out

    async def verify(self, task: MathTask, response: Response) -> Verdict:
        answer = extract_number(response.output_text())
        correct = answer is not None and same_number(answer, task.expected_answer)
        calls = sum(1 for c in response.function_calls() if c.name == "python")
        return Verdict(reward=1.0 if correct else 0.0, fields={"extracted_answer": answer, "tool_calls": calls})
