"""Function calling, single turn: the model's function calls must be the expected ones.

Rows are NeMo Gym's `xlam_fc` rows: the tools the model may call in
`responses_create_params.tools`, the answer in `expected_answers`, a list of
`{"name": ..., "arguments": {...}}` (several for parallel calls; empty when
the model should call nothing). The calls are the answer, so they are judged,
never run: the environment declares no tools and sets `execute_tool_calls =
False`, and the episode ends at the model's first turn.

The reward is `gym_serve.verifiers.tool_calls`'s: 1.0 when the calls equal the expected
ones as a multiset (same names; arguments equal after normalisation under the
row's tool schemas, omitted defaults allowed) with none extra, else 0.0.
`num_expected`, `num_predicted`, `num_correct`, `predicted_calls` (NeMo Gym's
fields) and `call_checks` (what matched, what was missing, extra or wrong,
and how) are added to the rollout.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.non_answer import is_non_answer
from gym_serve.verifiers.tool_calls import compare_calls
from gym_serve.wire.jsonl import unwritable

_MAX_DEPTH = 64
"""Parsed arguments nested deeper are reported as sent (the writer stops at about 250 levels of the whole row)."""


class FunctionCallTask(Task):
    responses_create_params: dict[str, Any]
    """The request; its `tools` are the functions the model may call, and their schemas type the arguments."""
    expected_answers: list[dict[str, Any]]
    """The expected calls, `{"name", "arguments"}` each (arguments an object or its JSON text)."""


class FunctionCallingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lenient: bool = Field(default=False, description="Strings spelling a number/boolean/JSON equal that value.")


class FunctionCalling(Environment[FunctionCallTask, None]):
    Config = FunctionCallingConfig
    execute_tool_calls = False

    async def verify(self, task: FunctionCallTask, response: Response) -> Verdict:
        calls = [item for item in response.output if item.get("type") == "function_call"]
        result = compare_calls(
            calls,
            task.expected_answers,
            tools=task.responses_create_params.get("tools") or [],
            lenient=self.config.lenient,
        )
        if not calls and is_non_answer(response.output_text(), task.prompt_text()):
            # "call nothing" is right only with a reply: an empty or refusing one is no answer (NeMo Gym pays it)
            return Verdict(
                reward=0.0,
                fields={
                    "num_expected": len(task.expected_answers),
                    "num_predicted": 0,
                    "num_correct": 0,
                    "predicted_calls": [],
                    "non_answer": True,
                },
            )
        return Verdict(
            reward=result.reward,
            fields={
                "num_expected": result.num_expected,
                "num_predicted": result.num_predicted,
                "num_correct": result.num_correct,
                "predicted_calls": [_plain(call) for call in calls],
                "call_checks": result.details(),
            },
        )


def _plain(call: dict[str, Any]) -> dict[str, Any]:
    """A call as NeMo Gym's `predicted_calls` holds it: name and parsed arguments (the raw text if unparseable).

    Also the raw text when the parsed arguments are JSON the rollout file's writer cannot write (an integer past
    64 bits, nesting past its depth): the model wrote them, and a row that cannot be written is lost, not scored.
    """
    sent = call.get("arguments", "")
    try:
        arguments = json.loads(sent) if isinstance(sent, str) and sent.strip() else sent or {}
    except (ValueError, RecursionError):
        arguments = sent  # kept as sent; `call_checks` says why it could not be read
    if unwritable(arguments, max_depth=_MAX_DEPTH) is not None:
        arguments = sent
    return {"name": call.get("name", ""), "arguments": arguments}
