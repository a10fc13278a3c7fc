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
    good = await ENV().verify(task, answer("```python\ndef double(x):\n    return 2 * x\n```"))
    assert (good.reward, good.fields["fraction_passed"]) == (1.0, 1.0)
    partial = await ENV().verify(task, answer("```python\ndef double(x):\n    return abs(2 * x)\n```"))
    assert partial.reward == 0.0 and abs(partial.fields["fraction_passed"] - 2 / 3) < 1e-9
    missing = await ENV().verify(task, answer("I would write a function that doubles x."))
    assert missing.reward == 0.0 and missing.fields["extracted_code"] is None


def nemo_row(unit_tests: dict | None = None, test: str | None = None) -> dict:
    meta = {k: v for k, v in {"unit_tests": unit_tests, "test": test}.items() if v is not None}
    return {"responses_create_params": {"input": "write it"}, "verifier_metadata": meta}


async def test_nemo_gym_rows_carry_their_tests_in_verifier_metadata() -> None:
    import base64
    import json
    import zlib

    from gym_serve import EnvRunner

    runner = EnvRunner(ENV())
    stdio = {"inputs": ["2 3\n", "10 -4\n"], "outputs": ["5\n", "6\n"]}
    solution = {"output": answer("```python\na, b = map(int, input().split())\nprint(a + b)\n```").output}
    assert (await runner.verify(nemo_row(stdio), solution, None))["reward"] == 1.0
    packed = {"packed": base64.b64encode(zlib.compress(json.dumps(stdio).encode())).decode()}
    assert (await runner.verify(nemo_row(packed), solution, None))["reward"] == 1.0
    # call-based (LeetCode style): each input line is one JSON argument; LiveCodeBench's imports (`List`) apply
    calls = {"inputs": ["[1, 2, 3]\n2"], "outputs": ["[3, 4, 5]"], "fn_name": "addAll"}
    leetcode = (
        "```python\nclass Solution:\n    def addAll(self, xs: List[int], k: int) -> List[int]:\n"
        "        return tuple(x + k for x in xs)\n```"
    )
    assert (await runner.verify(nemo_row(calls), {"output": answer(leetcode).output}, None))["reward"] == 1.0
    # `verifier_metadata.test`: test code; unittest cases in it are run
    unit = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n        self.assertEqual(f(2), 4)\n"
    square = {"output": answer("```python\ndef f(x):\n    return x * x\n```").output}
    assert (await runner.verify(nemo_row(test=unit), square, None))["reward"] == 1.0
    wrong = {"output": answer("```python\ndef f(x):\n    return x + 3\n```").output}
    assert (await runner.verify(nemo_row(test=unit), wrong, None))["reward"] == 0.0


async def test_a_row_without_tests_is_bad_input_not_a_zero() -> None:
    """Accepted before (and scored 0 whatever the code); NeMo Gym does the same."""
    import pytest

    from gym_serve import EnvRunner
    from gym_serve.errors import InputError

    runner = EnvRunner(ENV())
    for row in (nemo_row(), nemo_row({"inputs": [], "outputs": []}), {"responses_create_params": {"input": "x"}}):
        with pytest.raises(InputError, match="the row has no tests") as info:
            await runner.verify(row, {"output": answer("```python\nprint(1)\n```").output}, None)
        assert info.value.kind == "bad_input"
    with pytest.raises(InputError, match="2 inputs but 1 outputs"):
        await runner.verify(nemo_row({"inputs": ["1", "2"], "outputs": ["1"]}), {"output": []}, None)


async def test_a_think_tag_in_the_final_answer_scores_zero() -> None:
    task = CodeTask(tests=["assert double(2) == 4"])
    text = "<think>easy</think>\n```python\ndef double(x):\n    return 2 * x\n```"
    result = await ENV().verify(task, answer(text))
    assert result.reward == 0.0 and result.fields["reasoning_format_violation"] is True


async def test_a_package_only_the_solution_chose_is_its_own_failure() -> None:
    """Only a package the task imports can make a row unscorable: one the solution picked scores 0, not a mask."""
    task = CodeTask(tests=["assert double(2) == 4"])
    result = await ENV().verify(task, answer("```python\nimport wordcloud\ndef double(x):\n    return 2 * x\n```"))
    assert result.reward == 0.0 and result.fields["tests_passed"] == 0


async def test_a_package_the_tests_import_and_the_sandbox_lacks_fails_the_rollout_naming_it() -> None:
    import pytest

    from gym_serve.errors import FailureKind, MissingPackageError

    task = CodeTask(tests=["from wordcloud import WordCloud\nassert double(2) == 4"])
    with pytest.raises(MissingPackageError, match="the task imports `wordcloud`") as raised:
        await ENV().verify(task, answer("```python\ndef double(x):\n    return 2 * x\n```"))
    assert raised.value.kind is FailureKind.MISSING_PACKAGE
