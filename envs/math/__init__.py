"""Math word problems, single turn: the final answer must equal `expected_answer` (math-verify).

Rows are NeMo Gym's math rows (`math_with_judge` and friends): the prompt in
`responses_create_params`, the reference in `expected_answer`. The reward is
1.0 when the last `\\boxed{}` (else "the answer is", else the last number)
is mathematically equivalent to it; `extracted_answer` is reported, and
profiles use it for majority@k.
"""

from __future__ import annotations

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.math import verify_math


class MathTask(Task):
    expected_answer: str


class Math(Environment):
    Task = MathTask
    answer_key = "extracted_answer"

    async def verify(self, task: MathTask, response: Response, state: None) -> Verdict:
        result = await verify_math(response.output_text(), task.expected_answer)
        return Verdict(
            reward=result.reward,
            fields={"extracted_answer": result.extracted_answer, "verify_timed_out": result.timed_out},
        )
