"""Math-answer and multiple-choice verifiers on hand-made answers (right, wrong, hedged, hostile)."""

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
        ("The answer is 42.", "42"),
        ("we get 3 apples and then 1,250 pears", "1250"),
        ("no numbers here", None),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "expected", "reward"),
    [
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{\\frac{2}{4}}", "1/2", 1.0),
        ("The answer is 7.", "7", 1.0),
        ("\\boxed{[1, 3)}", "[1,3)", 1.0),
        ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}", 1.0),
        ("\\boxed{3}", "\\frac{1}{3}", 0.0),
        ("I do not know.", "5", 0.0),
    ],
)
async def test_verify_math(text: str, expected: str, reward: float) -> None:
    assert (await verify_math(text, expected)).reward == reward


async def test_an_overrunning_check_is_killed_and_the_next_call_works() -> None:
    started = time.monotonic()
    hostile = "\\boxed{" + "9" * 2000 + "^" + "9" * 2000 + "^" + "9" * 2000 + "}"
    assert (await verify_math(hostile, "1", timeout_s=1.0)).reward == 0.0
    overrun = await verify_math("\\boxed{2}", "2", timeout_s=1e-6)  # no worker answers that fast
    assert overrun.timed_out and overrun.reward == 0.0 and overrun.extracted_answer == "2"
    assert (await verify_math("\\boxed{2}", "2")).reward == 1.0, "a fresh worker replaced the killed one"
    assert time.monotonic() - started < 30


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


OPTIONS = {"A": "Karyotyping", "B": "Western blot", "C": "PCR", "D": "ELISA"}


@pytest.mark.parametrize(
    ("text", "strict", "letter"),
    [
        ("I think it is \\boxed{B}.", True, "B"),
        ("Reasoning...\nAnswer: C", True, "C"),
        ("**Answer:** (D)", True, "D"),
        ("\\boxed{A} or maybe \\boxed{C}", True, None),
        ("Answer: A, C", True, None),
        ("It's B", True, None),
        ("Long reasoning.\n\nB", False, "B"),
        ("The right technique is Western blot.", False, "B"),
        ("Either PCR or ELISA works.", False, None),
        ("\\boxed{E}", True, None),
    ],
)
def test_extract_choice(text: str, strict: bool, letter: str | None) -> None:
    assert extract_choice(text, OPTIONS, strict=strict) == letter


def test_verify_choice_never_rewards_two_options() -> None:
    assert verify_choice("\\boxed{B}", OPTIONS, "B") == (1.0, "B")
    assert verify_choice("\\boxed{B} \\boxed{C}", OPTIONS, "B") == (0.0, None)
    assert verify_choice("Answer: b", OPTIONS, "B")[0] == 0.0, "letters are capitals"
