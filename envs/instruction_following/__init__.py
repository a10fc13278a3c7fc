"""Instruction following (IFEval style), single turn: reward 1.0 when every instruction is followed strictly.

Rows are IFEval's and NeMo Gym's `instruction_following` rows, unchanged: the prompt in
`responses_create_params`, `instruction_id_list` and `kwargs` paired by position,
`prompt`, `key` (IFEval) or `id` (NeMo Gym) — at the top level, or under
`verifier_metadata` (NeMo Gym's newer layout, with `grading_mode`). The row's
instructions are validated when the row is read, so an unknown id or a bad kwarg
fails the rollout with a message naming it instead of silently scoring 0.

Reward: prompt-level strict (`grading_mode: binary`, the default), or the fraction of
instructions followed strictly (`grading_mode: fraction`, as NeMo Gym offers). Fields:
NeMo Gym's `follow_all_instructions` and `follow_instruction_list` (strict), the loose
list, and IFEval's four numbers, so `gym-serve profile` reports their means.

Where we differ from NeMo Gym: a content-free answer pays 0 (`non_answer: true`), whatever
it happens to follow. Every IFEval and NeMo Gym prompt asks for a text, so on no row can an
answer without content be right: an empty or blank one, refusals, JSON whose values are all
null or empty (it is JSON, and its keys can hold every keyword), or the prompt echoed back.
The prompt is judged by content, not length: every copy of it is taken out of the answer and
the instructions are checked on what is left, the model's own text. The one per-row
exception is a row that asks for the prompt to be repeated (`combination:repeat_prompt`):
there the copy is part of the answer and is checked with it, and what follows it must still
have content.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.instruction_following import check_instructions, make_instructions
from gym_serve.verifiers.non_answer import is_non_answer, without_echo

REPEAT_PROMPT = "combination:repeat_prompt"


class InstructionTask(Task):
    instruction_id_list: list[str]
    kwargs: list[dict[str, Any] | None]
    prompt: str | None = None
    grading_mode: Literal["binary", "fraction"] = "binary"

    @model_validator(mode="before")
    @classmethod
    def _lift_verifier_metadata(cls, data: Any) -> Any:
        """NeMo Gym's newer rows nest the scoring fields under `verifier_metadata`; top-level fields win."""
        if isinstance(data, dict) and isinstance(data.get("verifier_metadata"), dict):
            return {**data["verifier_metadata"], **data}
        return data

    @field_validator("kwargs")
    @classmethod
    def _instructions_fit(cls, kwargs: list[dict[str, Any] | None], info: ValidationInfo) -> list:
        if "instruction_id_list" in info.data:
            make_instructions(info.data["instruction_id_list"], kwargs)
        return kwargs


class InstructionFollowing(Environment[InstructionTask, None]):
    """Single turn; the final message is checked against the row's instructions (see the module docstring)."""

    async def verify(self, task: InstructionTask, response: Response) -> Verdict:
        text, prompt = response.output_text(), task.prompt_text()
        if is_non_answer(text, prompt):  # "i don't know" is lowercase and short: it follows nothing asked
            count = len(task.instruction_id_list)
            fields = {"follow_all_instructions": False, "follow_instruction_list": [False] * count, "non_answer": True}
            return Verdict(reward=0.0, fields=fields)
        if REPEAT_PROMPT not in task.instruction_id_list:  # the prompt's own words are not the model's
            text = without_echo(text, prompt)
        result = check_instructions(text, make_instructions(task.instruction_id_list, task.kwargs))
        reward = (
            float(result.prompt_level_strict) if task.grading_mode == "binary" else result.instruction_level_strict
        )
        return Verdict(
            reward=reward,
            fields={
                "follow_all_instructions": result.prompt_level_strict,
                "follow_instruction_list": [r.strict for r in result.instructions],
                "follow_instruction_list_loose": [r.loose for r in result.instructions],
                "prompt_level_strict": float(result.prompt_level_strict),
                "prompt_level_loose": float(result.prompt_level_loose),
                "instruction_level_strict": result.instruction_level_strict,
                "instruction_level_loose": result.instruction_level_loose,
            },
        )
