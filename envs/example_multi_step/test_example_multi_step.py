"""Synonym extraction: the exact values in the asked order score 1; anything else scores 0."""

from __future__ import annotations

from gym_serve import Response

from . import SynonymExtraction, SynonymTask, synonym_value

TASK = SynonymTask(expected_synonym_values=[711, 407])


def extracted(values: list[int]) -> Response:
    import json

    return Response.model_validate(
        {
            "output": [
                {
                    "type": "function_call",
                    "name": "extract_synonym_values",
                    "call_id": "c",
                    "arguments": json.dumps({"synonym_values": values}),
                },
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
