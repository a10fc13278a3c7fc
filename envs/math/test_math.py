"""Every example row: the recorded right answer scores 1, the recorded wrong answer 0, through the agent loop."""

from __future__ import annotations

from gym_serve import EnvRunner
from gym_serve.testing.fixtures import replay_examples

from . import Math


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(Math)
    assert len(examples) >= 5
    for _, right, wrong in examples:
        assert right["reward"] == 1.0 and right["extracted_answer"] is not None
        assert wrong["reward"] == 0.0


def said(text: str) -> dict:
    return {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


async def test_an_answer_math_verify_cannot_finish_scores_0_not_a_masked_row() -> None:
    """A tower of powers keeps sympy busy for ever: the policy wrote it, so it is a 0, never `verifier_timeout`.

    The reference's own check finishes in milliseconds, which is how the verifier tells the answer's overrun
    from a machine too busy to check anything (that one stays masked: `tests/test_unscored_outcomes.py`).
    The runner raises `VerifierTimeoutError` past the deadline: a verdict at all means the environment decided.
    """
    runner = EnvRunner(Math(verify_timeout_s=5.0))
    row = {"responses_create_params": {"input": "What is 1/2 as a fraction?"}, "expected_answer": "\\frac{1}{2}"}
    verdict = await runner.verify(row, said("\\boxed{9^{9^{9^{9}}}}"), None)
    assert verdict["reward"] == 0.0 and verdict["extracted_answer"] == "9^{9^{9^{9}}}"
    assert "could not check the answer" in verdict["rejected"]
    assert (await runner.verify(row, said("\\boxed{0.5}"), None))["reward"] == 1.0, "a new worker replaced it"
