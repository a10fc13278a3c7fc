"""Every example row: the recorded right answer scores 1, the recorded wrong answer 0, through the agent loop."""

from __future__ import annotations

import time

from gym_serve import EnvRunner
from gym_serve.testing.fixtures import replay_examples

from . import MultipleChoice


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(MultipleChoice)
    assert len(examples) >= 5
    for _, right, wrong in examples:
        assert right["reward"] == 1.0 and right["extracted_answer"] is not None
        assert wrong["reward"] == 0.0


async def test_a_line_repeating_the_answer_prefix_is_read_in_linear_time() -> None:
    """Each `answer_prefix` payload runs to the end of its line: N prefixes on a line, N overlapping payloads. Read
    all (as NeMo Gym does), a 100 kB line took 35 s of a stalled replica and could end as `verifier_timeout`,
    a masked row the policy's text bought; the last 64 places are read, and the answer gets the 0 it earned."""
    runner = EnvRunner(MultipleChoice({"grading_mode": "lenient_answer_colon_md"}))
    options = [{"A": "Red"}, {"B": "Blue"}]
    row = {"responses_create_params": {"input": "Which?"}, "options": options, "expected_answer": "B"}
    row["template_metadata"] = {"answer_prefix": "Final answer:"}
    started = time.monotonic()
    for text, reward in (("Final answer:" * 20_000, 0.0), ("Final answer: x Z" * 20_000 + "\nFinal answer: B", 1.0)):
        said = {
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
        }
        assert (await runner.verify(row, said, None))["reward"] == reward
    assert time.monotonic() - started < 5
