"""Code generation: sandboxed tests decide the reward; the example recordings replay right and wrong."""

from __future__ import annotations

from gym_serve import Response

from . import CodeGeneration, CodeTask

ENV, CONFIG = CodeGeneration, None


def answer(text: str) -> Response:
    return Response.model_validate(
        {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}
    )


async def test_reward_needs_every_test_and_reports_the_fraction() -> None:
    task = CodeTask(tests=["assert double(2) == 4", "assert double(0) == 0", "assert double(-1) == -2"])
    good = await ENV().verify(task, answer("```python\ndef double(x):\n    return 2 * x\n```"), None)
    assert (good.reward, good.fields["fraction_passed"]) == (1.0, 1.0)
    partial = await ENV().verify(task, answer("```python\ndef double(x):\n    return abs(2 * x)\n```"), None)
    assert partial.reward == 0.0 and abs(partial.fields["fraction_passed"] - 2 / 3) < 1e-9
    missing = await ENV().verify(task, answer("I would write a function that doubles x."), None)
    assert missing.reward == 0.0 and missing.fields["extracted_code"] is None
