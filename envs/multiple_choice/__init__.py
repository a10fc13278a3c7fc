"""Multiple-choice questions, scored as NeMo Gym's `mcqa` scores them.

Rows are NeMo Gym's `mcqa` rows: `options` as a list of one-entry objects
(`[{"A": "Karyotyping"}, {"B": "..."}]`), `expected_answer` a letter,
`grading_mode` (`strict_single_letter_boxed`, the default; `lenient_boxed`;
`lenient_answer_colon`) and optional `template_metadata` (`output_regex`, a
pattern or a list of them, read first; `answer_prefix`). The environment's
config `grading_mode` overrides every row's, and may also be
`lenient_answer_colon_md`, as NeMo Gym's server config. The rules are
`gym_serve.verifiers.multiple_choice`'s.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.multiple_choice import GradingMode, verify_choice


class TemplateMetadata(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    output_regex: str | list[str] | None = None
    """Where the answer is: the last match of this pattern (or of the first of these that matches)."""
    answer_prefix: str | None = None
    """Text before the answer, for `lenient_answer_colon_md`."""


class ChoiceTask(Task):
    options: list[dict[str, str | None]]
    expected_answer: str
    grading_mode: Literal["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon"] = (
        "strict_single_letter_boxed"
    )
    template_metadata: TemplateMetadata | None = None


class ChoiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grading_mode: GradingMode | None = Field(default=None, description="Overrides every row's `grading_mode`.")


class MultipleChoice(Environment[ChoiceTask, None]):
    Config = ChoiceConfig
    answer_key = "extracted_answer"

    async def verify(self, task: ChoiceTask, response: Response) -> Verdict:
        template = task.template_metadata or TemplateMetadata()
        reward, chosen = verify_choice(
            response.output_text(),
            task.options,
            task.expected_answer,
            mode=self.config.grading_mode or task.grading_mode,
            output_regex=template.output_regex,
            answer_prefix=template.answer_prefix,
        )
        fields: dict[str, Any] = {"extracted_answer": chosen, "expected_answer": task.expected_answer.strip().upper()}
        return Verdict(reward=reward, fields=fields)
