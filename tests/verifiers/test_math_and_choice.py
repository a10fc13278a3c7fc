"""Math-answer and multiple-choice verifiers on hand-made answers (right, wrong, hedged, hostile, slow).

NeMo Gym's own verdicts on the same kinds of answers are held in `tests/test_nemo_gym_scoring.py`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
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


async def test_an_overrunning_check_is_the_answers_0_unless_the_reference_overruns_too() -> None:
    started = time.monotonic()
    hostile = "\\boxed{" + "9" * 2000 + "^" + "9" * 2000 + "^" + "9" * 2000 + "}"
    slow = await verify_math(hostile, "1", timeout_s=1.0)
    assert (slow.reward, slow.overran, slow.timed_out) == (0.0, True, False), "the reference's own check finished"
    overrun = await verify_math("\\boxed{2}", "2", timeout_s=1e-6)  # no worker answers that fast, for either
    assert overrun.timed_out and not overrun.overran and overrun.extracted_answer == "2", "unscored: not the answer's"
    assert (await verify_math("\\boxed{2}", "2")).reward == 1.0, "a fresh worker replaced the killed one"
    assert time.monotonic() - started < 30


async def test_a_check_its_caller_gave_up_on_does_not_hold_up_the_next() -> None:
    """The caller's own deadline (the runner's, `verify_timeout_s` + 1 s) can come first: the worker is reset."""
    hostile = "\\boxed{" + "9" * 2000 + "^" + "9" * 2000 + "^" + "9" * 2000 + "}"  # minutes of math-verify
    assert (await verify_math("\\boxed{1}", "1")).reward == 1.0  # a warm worker: the hostile check starts at once
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(verify_math(hostile, "1", timeout_s=600.0), 1.0)
    started = time.monotonic()
    result = await asyncio.wait_for(verify_math("\\boxed{2}", "2", timeout_s=5.0), 60)
    assert (result.reward, result.timed_out) == (1.0, False)
    assert time.monotonic() - started < 20, "the abandoned check was killed, not waited for"


def test_the_workers_start_up_is_outside_every_deadline() -> None:
    """In a fresh process, the first check passes a deadline far below the worker's start-up (seconds)."""
    script = (
        "import asyncio, json\n"
        "from gym_serve import EnvRunner\n"
        "from gym_serve.environment.registry import load_environment_class\n"
        "runner = EnvRunner(load_environment_class('math')(verify_timeout_s=0.3))\n"
        "row = {'responses_create_params': {'input': 'q'}, 'expected_answer': '\\\\frac{1}{2}'}\n"
        "answer = {'output': [{'type': 'message', 'role': 'assistant',\n"
        "    'content': [{'type': 'output_text', 'text': 'So \\\\boxed{0.5}'}]}]}\n"
        "print(json.dumps(asyncio.run(runner.verify(row, answer, None))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["reward"] == 1.0


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
