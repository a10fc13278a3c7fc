"""Synonym extraction: the exact values in the asked order score 1; anything else scores 0."""

from __future__ import annotations

import json

import pytest

from gym_serve import EnvRunner, Response
from gym_serve.wire.jsonl import dumps

from . import SynonymExtraction, SynonymTask, synonym_value

TASK = SynonymTask(expected_synonym_values=[711, 407])


def extracted(values: list[int]) -> Response:
    return called(json.dumps({"synonym_values": values}))


def called(arguments: str) -> Response:
    return Response.model_validate(
        {
            "output": [
                {"type": "function_call", "name": "extract_synonym_values", "call_id": "c", "arguments": arguments},
                {"type": "function_call_output", "call_id": "c", "output": '{"success": true}'},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
            ]
        }
    )


def test_synonym_values_match_nemo_gym() -> None:
    assert synonym_value("Blazing") == 711  # the values in NeMo Gym's recorded rollouts
    assert synonym_value("Warm") == 407


async def test_verify_right_wrong_and_misordered() -> None:
    env = SynonymExtraction()
    right = await env.verify(TASK, extracted([711, 407]))
    assert right.reward == 1.0 and right.fields["accuracy"] is True
    swapped = await env.verify(TASK, extracted([407, 711]))
    assert swapped.reward == 0.0 and swapped.fields["order_instruction_following_failure"] is True
    partial = await env.verify(TASK, extracted([711, 1]))
    assert partial.reward == 0.0 and partial.fields["set_overlap"] == 0.5


@pytest.mark.parametrize(
    "arguments",
    [
        '{"synonym_values": 5}',
        '{"synonym_values": null}',
        '["synonym_values"]',
        '{"synonym_values": [' + "7" * 5000 + "]}",  # past Python's 4300 digits: `json.loads` raises ValueError
        '{"synonym_values": ' + "[" * 100_000,  # past the parser's stack: RecursionError
        "{not json",
    ],
)
async def test_arguments_the_model_garbled_score_0_not_a_failed_rollout(arguments: str) -> None:
    """The model wrote them: a verify that raised on them would turn its 0 into a masked failure row."""
    row = {"responses_create_params": {"input": "q"}, **TASK.model_dump()}
    verdict = await EnvRunner(SynonymExtraction()).verify(row, called(arguments).model_dump(), None)
    assert verdict["reward"] == 0.0 and verdict["parsed_synonym_values"] == []


async def test_an_integer_past_64_bits_is_reported_as_text_so_the_row_can_be_written() -> None:
    """The rollout file's writer (orjson) takes no integer past 64 bits: a row holding one would be lost."""
    row = {"responses_create_params": {"input": "q"}, **TASK.model_dump()}
    huge = "9" * 30
    verdict = await EnvRunner(SynonymExtraction()).verify(
        row, called(f'{{"synonym_values": [711, {huge}]}}').model_dump(), None
    )
    assert verdict["reward"] == 0.0 and verdict["parsed_synonym_values"] == [711, huge]
    assert dumps(verdict)
