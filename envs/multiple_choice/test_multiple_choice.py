"""Every example row: the recorded right answer scores 1, the recorded wrong answer 0, through the agent loop."""

from __future__ import annotations

from gym_serve.testing.fixtures import replay_examples

from . import MultipleChoice


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(MultipleChoice)
    assert len(examples) >= 5
    for _, right, wrong in examples:
        assert right["reward"] == 1.0 and right["extracted_answer"] is not None
        assert wrong["reward"] == 0.0
