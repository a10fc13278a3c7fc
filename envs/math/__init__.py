"""Math word problems, single turn: the boxed answer must equal `expected_answer` (math-verify), as NeMo Gym scores.

Rows are NeMo Gym's math rows (`math_with_judge` and friends): the prompt in
`responses_create_params`, the reference in `expected_answer`. The reward is
`gym_serve.verifiers.math`'s: 0 without a `\\boxed{}`, else math-verify's
equivalence of the text with the reference (NeMo Gym's library path, no judge).
`extracted_answer` is reported, and profiles use it for majority@k.

A check that does not finish within `verify_timeout_s` (10 s, NeMo Gym's
default; set it per deployment) is the answer's or the machine's, and the
verifier tells them apart by checking the reference against itself: when that
finishes, the answer is what could not be checked and scores 0 (`rejected`
says so), as a hang a policy can write (`\\boxed{9^{9^{9^{9}}}}`) must not buy
it a masked row; when that overruns too, the rollout fails as
`verifier_timeout` (masked), since a busy machine must not turn a right answer
into a 0. The check's worker process starts when the environment is built, not
inside a deadline.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.errors import VerifierTimeoutError
from gym_serve.verifiers.math import DEFAULT_TIMEOUT_S, start_worker, verify_math


class MathTask(Task):
    expected_answer: str


class Math(Environment[MathTask, None]):
    answer_key = "extracted_answer"
    verify_timeout_s = DEFAULT_TIMEOUT_S

    def __init__(
        self, config: BaseModel | dict[str, Any] | None = None, *, verify_timeout_s: float | None = None
    ) -> None:
        super().__init__(config, verify_timeout_s=verify_timeout_s)
        start_worker()  # math-verify's worker starts with the environment, so no verify deadline pays for it

    async def verify(self, task: MathTask, response: Response) -> Verdict:
        result = await verify_math(response.output_text(), task.expected_answer, timeout_s=self.verify_timeout_s)
        if result.timed_out:
            raise VerifierTimeoutError(
                f"math-verify did not decide `{result.extracted_answer}` against `{task.expected_answer}` "
                f"within {self.verify_timeout_s:g} s (`verify_timeout_s`), nor the reference against itself"
            )
        fields: dict[str, Any] = {"extracted_answer": result.extracted_answer}
        if result.overran:
            fields["rejected"] = (
                f"math-verify could not check the answer within its share of {self.verify_timeout_s:g} s "
                "(`verify_timeout_s`); the reference against itself took less"
            )
        return Verdict(reward=result.reward, fields=fields)
