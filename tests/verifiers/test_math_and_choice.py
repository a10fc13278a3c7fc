"""Math-answer and multiple-choice verifiers on hand-made answers (right, wrong, hedged, hostile, slow).

NeMo Gym's own verdicts on the same kinds of answers are held in `tests/test_nemo_gym_scoring.py`.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gym_serve.verifiers.math import extract_answer, verify_math
from gym_serve.verifiers.multiple_choice import extract_choice, verify_choice


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so x = \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{3}, then corrected: \\boxed{4}", "4"),
        ("nested \\boxed{\\sqrt{x^{2}}}", "\\sqrt{x^{2}}"),
        ("The answer is 42.", None),
        ("an unclosed \\boxed{4", None),
        ("no numbers here", None),
    ],
)
def test_extract_answer_reads_only_the_last_complete_box(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "expected", "reward"),
    [
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{\\frac{2}{4}}", "1/2", 1.0),
        ("\\boxed{[1, 3)}", "[1,3)", 1.0),
        ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}", 1.0),
        ("\\boxed{3}", "\\frac{1}{3}", 0.0),
        ("The answer is 7.", "7", 0.0),  # accepted before (the "answer is" fallback); NeMo Gym: no box, no reward
        ("\\boxed{ }", "7", 0.0),
        ("I do not know.", "5", 0.0),
    ],
)
async def test_verify_math(text: str, expected: str, reward: float) -> None:
    assert (await verify_math(text, expected)).reward == reward


async def test_an_overrunning_check_times_out_unscored_and_the_next_call_works() -> None:
    started = time.monotonic()
    hostile = "\\boxed{" + "9" * 2000 + "^" + "9" * 2000 + "^" + "9" * 2000 + "}"
    slow = await verify_math(hostile, "1", timeout_s=1.0)
    assert slow.timed_out, "a check that overran says so: the caller must not score it"
    overrun = await verify_math("\\boxed{2}", "2", timeout_s=1e-6)  # no worker answers that fast
    assert overrun.timed_out and overrun.extracted_answer == "2"
    assert (await verify_math("\\boxed{2}", "2")).reward == 1.0, "a fresh worker replaced the killed one"
    assert time.monotonic() - started < 30


async def test_the_deadline_times_the_check_not_its_wait_in_the_queue() -> None:
    """Twenty checks queued behind each other, each well within the deadline: none may time out."""
    results = await asyncio.gather(*(verify_math(f"\\boxed{{{i}/7}}", f"{i}/7", timeout_s=5.0) for i in range(20)))
    assert [r.timed_out for r in results] == [False] * 20
    assert [r.reward for r in results] == [1.0] * 20


async def test_math_verification_does_not_block_the_event_loop() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    await asyncio.gather(*(verify_math(f"\\boxed{{{i}/7}}", f"{i}/7") for i in range(20)))
    ticker.cancel()
    assert ticks > 0


OPTIONS = [{"A": "Karyotyping"}, {"B": "Western blot"}, {"C": "PCR"}, {"D": "ELISA"}]


@pytest.mark.parametrize(
    ("text", "mode", "letter"),
    [
        ("I think it is \\boxed{B}.", "strict_single_letter_boxed", "B"),
        ("\\boxed{\\text{D}}", "strict_single_letter_boxed", "D"),
        ("Reasoning...\nAnswer: C", "strict_single_letter_boxed", None),  # accepted before; NeMo Gym: no box
        ("\\boxed{A} or maybe \\boxed{C}", "strict_single_letter_boxed", "C"),  # the last box decides, as NeMo Gym
        ("\\boxed{A, C}", "strict_single_letter_boxed", None),
        ("\\boxed{E}", "strict_single_letter_boxed", None),
        ("\\boxed{Western blot}", "lenient_boxed", "B"),
        ("\\boxed{PCR or ELISA}", "lenient_boxed", None),
        ("Answer: PCR", "lenient_answer_colon", "C"),
        ("**Answer:** B", "lenient_answer_colon_md", "B"),
        ("**Answer:** A or B", "lenient_answer_colon_md", None),
    ],
)
def test_extract_choice(text: str, mode: str, letter: str | None) -> None:
    assert extract_choice(text, OPTIONS, mode=mode) == letter  # type: ignore[arg-type]


def test_a_row_regex_is_read_first_and_its_last_match_counts() -> None:
    regex = r"Final Choice:\s*\(?([A-Za-z])"
    assert extract_choice("Final Choice: (A) ... Final Choice: d", OPTIONS, output_regex=regex) == "D"
    assert extract_choice("\\boxed{B}", OPTIONS, output_regex=regex) == "B", "no match: the grading mode reads it"
    assert extract_choice("\\boxed{B}", OPTIONS, output_regex="(unbalanced") == "B", "a broken regex is ignored"


def test_non_answers_choose_nothing() -> None:
    for text in ("", "   ", "I don't know", "Which technique detects a protein? A) Karyotyping B) Western blot"):
        for mode in ("strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "lenient_answer_colon_md"):
            assert verify_choice(text, OPTIONS, "B", mode=mode) == (0.0, None), (text, mode)
    assert verify_choice("Answer: b", OPTIONS, "B")[0] == 0.0
