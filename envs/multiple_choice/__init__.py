"""Multiple-choice questions: the chosen letter must be `expected_answer`; naming two options scores 0.

Rows are NeMo Gym's `mcqa` rows: `options` as a list of one-entry objects
(`[{"A": "Karyotyping"}, {"B": "..."}]`), `expected_answer` a letter, and
`grading_mode` — `strict_single_letter_boxed` (only `\\boxed{X}` or a final
`Answer: X` line count; the default) or `lenient` (also a lone letter on the
last line, or the text of exactly one option).
"""

from __future__ import annotations

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.multiple_choice import verify_choice


class ChoiceTask(Task):
    options: list[dict[str, str]]
    expected_answer: str
    grading_mode: str = "strict_single_letter_boxed"


class MultipleChoice(Environment):
    Task = ChoiceTask
    answer_key = "extracted_answer"

    async def verify(self, task: ChoiceTask, response: Response, state: None) -> Verdict:
        options = {letter: text for option in task.options for letter, text in option.items()}
        reward, chosen = verify_choice(
            response.output_text(), options, task.expected_answer, strict=task.grading_mode != "lenient"
        )
        return Verdict(reward=reward, fields={"extracted_answer": chosen})
