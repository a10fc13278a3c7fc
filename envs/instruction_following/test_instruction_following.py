"""Every example row replays right (1.0) then wrong (0.0); both row layouts, grading modes and bad rows."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gym_serve import EnvRunner, InputError
from gym_serve.testing.fixtures import replay_examples

from . import InstructionFollowing


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "r",
        "object": "response",
        "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
    }


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(InstructionFollowing)
    assert len(examples) >= 5
    assert any("verifier_metadata" in row for row, _, _ in examples) and any("key" in row for row, _, _ in examples)
    for _, good, bad in examples:
        assert good["reward"] == 1.0 and good["follow_all_instructions"] is True
        assert good["prompt_level_loose"] == good["instruction_level_strict"] == 1.0
        assert bad["reward"] == 0.0 and False in bad["follow_instruction_list"]
        assert len(bad["follow_instruction_list"]) == len(good["follow_instruction_list"]) > 0


def nemo_row(**fields: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Say hi without commas, quoted."}]},
        "instruction_id_list": ["punctuation:no_comma", "startend:quotation"],
        "kwargs": [{}, None],
        **fields,
    }


async def test_fraction_grading_and_reported_fields() -> None:
    runner = EnvRunner(InstructionFollowing())
    binary = await runner.verify(nemo_row(), answer("hi there"), None)
    fraction = await runner.verify(nemo_row(grading_mode="fraction"), answer("hi there"), None)
    assert (binary["reward"], fraction["reward"]) == (0.0, 0.5)
    assert binary["follow_instruction_list"] == [True, False] and binary["instruction_level_strict"] == 0.5
    loose = await runner.verify(nemo_row(), answer('Sure:\n"hi there"'), None)
    assert (loose["reward"], loose["prompt_level_loose"]) == (0.0, 1.0), (
        "loose forgives the preamble; reward is strict"
    )


async def test_verifier_metadata_layout_is_read() -> None:
    fields = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], "grading_mode": "binary"}
    row = {"responses_create_params": {"input": "Say hi."}, "verifier_metadata": fields}
    result = await EnvRunner(InstructionFollowing()).verify(row, answer("hi, you"), None)
    assert result["reward"] == 0.0 and result["follow_instruction_list"] == [False]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"instruction_id_list": ["paragraphs:paragraphz"], "kwargs": [{}]}, "`paragraphs:paragraphz`: unknown"),
        (
            {"kwargs": [{"num_words": 5}, None]}
            | {"instruction_id_list": ["length_constraints:number_words", "startend:quotation"]},
            "`length_constraints:number_words`, kwarg `relation`: required",
        ),
        ({"kwargs": [{}]}, "2 ids but `kwargs` has 1"),
    ],
)
async def test_bad_rows_fail_with_the_instruction_named(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(InputError, match="instruction_following") as info:
        await EnvRunner(InstructionFollowing()).verify(nemo_row(**fields), answer("hi"), None)
    assert says in str(info.value)


POEM = (
    "Write a short poem about the sea. Include the keywords waves and salt. "
    "Your entire response should be in lowercase letters."
)


def poem_row(ids: list[str], kwargs: list[dict[str, Any] | None]) -> dict[str, Any]:
    return {"responses_create_params": {"input": POEM}, "instruction_id_list": ids, "kwargs": kwargs}


KEYWORDS_LOWERCASE = (["keywords:existence", "change_case:english_lowercase"], [{"keywords": ["waves", "salt"]}, None])


@pytest.mark.parametrize(
    "text",
    [
        POEM.lower() + "\n\nthis is the poem you asked for, enjoy it.",  # the echo and ~40 characters: once paid 1.0
        '{"waves": null, "salt": ""}',  # JSON and the keywords, nothing in it: once paid 1.0 with json_format
        '```json\n{"poem": {"waves": [], "salt": null}}\n```',
        POEM.lower() + "\n\ni don't know. no idea.",
    ],
)
async def test_content_free_answers_follow_nothing(text: str) -> None:
    """The prompt's own words are not the model's, and empty JSON is not an answer, whatever they happen to follow."""
    runner = EnvRunner(InstructionFollowing())
    ids, kwargs = KEYWORDS_LOWERCASE
    rows = [poem_row(ids, kwargs), poem_row([*ids, "detectable_format:json_format"], [*kwargs, None])]
    for row in rows:
        assert (await runner.verify(row, answer(text), None))["reward"] == 0.0, (row["instruction_id_list"], text)
    poem = "waves of salt\nroll in and out\nthe sea keeps its counsel"
    assert (await runner.verify(rows[0], answer(poem), None))["reward"] == 1.0
    assert (await runner.verify(rows[1], answer('{"poem": "waves of salt roll in"}'), None))["reward"] == 1.0


async def test_a_row_that_asks_for_the_prompt_repeated_checks_the_copy_and_needs_content_after_it() -> None:
    """The one row where the echo belongs to the answer: it is checked with it, and must not be all there is."""
    runner = EnvRunner(InstructionFollowing())
    row = poem_row(
        ["combination:repeat_prompt", "keywords:existence"], [{"prompt_to_repeat": POEM}, {"keywords": ["tide"]}]
    )
    assert (await runner.verify(row, answer(POEM + "\nwaves and the tide come in"), None))["reward"] == 1.0
    for text in (POEM, POEM + "\n\nI don't know.", "waves and the tide come in"):
        got = await runner.verify(row, answer(text), None)
        assert got["reward"] == 0.0, text
    assert (await runner.verify(row, answer(POEM), None))["non_answer"] is True


async def test_a_run_of_blank_lines_is_checked_in_linear_time() -> None:
    """IFEval's bullet-list regexes backtrack quadratically on blank lines: minutes of a stalled replica, and a
    `verifier_timeout` (masked) the policy's own text caused. Checked in linear time, it is the 0 it earns."""
    row = nemo_row(instruction_id_list=["detectable_format:number_bullet_lists"], kwargs=[{"num_bullets": 2}])
    runner = EnvRunner(InstructionFollowing())
    started = time.monotonic()
    blank = await runner.verify(row, answer("Hi\n" + "\n" * 100_000 + "* one"), None)
    listed = await runner.verify(row, answer("Hi\n" + "\n" * 100_000 + "* one\n\n\n- two"), None)
    assert time.monotonic() - started < 5
    assert (blank["reward"], listed["reward"]) == (0.0, 1.0)
