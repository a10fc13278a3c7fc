"""Math answers scored as NeMo Gym's `math_with_judge` scores them (its library path), never stalling the caller.

- The answer must be boxed: a text without a complete, non-blank `\\boxed{...}` scores 0
  and math-verify is not called ("The answer is 4" is not an answer to a boxed-answer task).
- Equivalence is math-verify's, called as NeMo Gym calls it: the reference (outer `$...$` or
  `\\(...\\)` removed) is parsed as `\\boxed{reference}` with LaTeX extraction, the whole text
  with expression and LaTeX extraction, at 6-digit precision. A reference math-verify cannot
  parse scores 0, as there.
- `extracted_answer` is NeMo Gym's: the first extracted prediction that verifies, else the first.

Rewards must not depend on how busy the machine is, and a policy must not be able to turn its 0
into no score. math-verify bounds its own parse and compare with 5 s alarms that turn into a
silent 0; here those are off, and the check runs in a worker process under a deadline
(`timeout_s`, 10 s by default as NeMo Gym's `library_verifier_timeout_seconds`, of which the
answer's check gets `ANSWER_SHARE`). When the answer's check overruns it, the worker is killed
and replaced (an adversarial expression, `\\boxed{9^{9^{9^{9}}}}`, cannot stall the replica),
and the same check on pristine input, the reference against itself, gets the rest of the
deadline. If that one finishes, the answer is what could not be checked: reward 0 (`overran`),
as every overrun is in NeMo Gym. If it does not, the machine is too slow to check anything: the
result says `timed_out` and is *not* scored (the environment turns that into a
`verifier_timeout` failure). A right answer whose check needs more than its share of the deadline
scores 0; raise `timeout_s` for data whose answers are that slow to compare.

When the caller gives up first (its own deadline cancels the check), the worker is killed too:
the abandoned check never holds up the next one. The worker's start-up (a fork server,
math-verify's import and its parser's first load, seconds on a busy machine) is never part of a
check's time: `start_worker()` does it before any check (the environment calls it when it is
built), and a replacement is started as soon as a worker is killed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gym_serve.verifiers.worker import Worker

__all__ = [
    "ANSWER_SHARE",
    "DEFAULT_TIMEOUT_S",
    "MathResult",
    "extract_answer",
    "is_equivalent",
    "start_worker",
    "verify_math",
]

DEFAULT_TIMEOUT_S = 10.0
"""NeMo Gym's `library_verifier_timeout_seconds` default."""
ANSWER_SHARE = 0.9
"""The part of `timeout_s` the answer's check gets; the reference's own check, run only when the answer's
overran, gets the rest (it is one expression against itself: milliseconds on a machine that is not stalled)."""


@dataclass(frozen=True)
class MathResult:
    """`reward` is meaningful only when `timed_out` is False."""

    reward: float
    extracted_answer: str | None
    timed_out: bool = False
    """Not even the reference's own check finished in time: the machine, not the answer, is at fault (unscored)."""
    overran: bool = False
    """The answer's check overran while the reference's own finished: the answer could not be checked (reward 0)."""


def extract_answer(text: str) -> str | None:
    """The contents of the last complete `\\boxed{...}` (nested braces counted), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 1, start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


def _strip_delimiters(expected: str) -> str:
    expected = expected.strip()
    if expected.startswith("\\(") and expected.endswith("\\)"):
        expected = expected[2:-2].strip()
    if expected.startswith("$") and expected.endswith("$") and len(expected) > 1:
        expected = expected[1:-1].strip()
    return expected


def is_equivalent(expected: str, text: str) -> tuple[bool, str | None]:
    """math-verify's verdict on `text` against `expected`, and the extracted answer (runs here: use `verify_math`)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, grader, parse, parser, verify

    parser.TIMEOUT_WARNING_SHOWN = grader.TIMEOUT_WARNING_SHOWN = True  # the deadline is ours, as it warns
    gold = parse("\\boxed{" + _strip_delimiters(expected) + "}", [LatexExtractionConfig()], parsing_timeout=None)
    predictions = parse(text, [ExprExtractionConfig(), LatexExtractionConfig()], parsing_timeout=None)
    first = str(predictions[0]) if predictions else None
    if not gold:
        return False, None
    for prediction in predictions:
        if verify(gold, prediction, float_rounding=6, timeout_seconds=None):
            return True, str(prediction)
    return False, first


def _ready() -> bool:
    """Instant in a warm worker; in a new one, loads what the first check would (math-verify's LaTeX parser)."""
    return is_equivalent("1", "\\boxed{1}")[0]


_workers = Worker(["math_verify"], warm=_ready)


def start_worker() -> None:
    """Start the worker and load math-verify in it now (blocking), so that no check's deadline pays for it."""
    _workers.pool().submit(_ready).result()


async def verify_math(text: str, expected: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> MathResult:
    """Reward 1.0 when the boxed answer in `text` equals `expected` (math-verify), else 0.0; see the module doc."""
    boxed = extract_answer(text)
    if boxed is None or not boxed.strip():
        return MathResult(0.0, None)
    async with _workers.turn():
        checked = await _check(expected, text, timeout_s * ANSWER_SHARE)
        if checked is None:  # the answer's check overran: is it the answer, or the machine?
            pristine = "\\boxed{" + _strip_delimiters(expected) + "}"
            control = await _check(expected, pristine, timeout_s * (1 - ANSWER_SHARE))
            return MathResult(0.0, boxed, timed_out=control is None, overran=control is not None)
    same, extracted = checked
    return MathResult(1.0 if same else 0.0, extracted)


async def _check(expected: str, text: str, timeout_s: float) -> tuple[bool, str | None] | None:
    """`is_equivalent` in the worker within `timeout_s` (after a warm-up, off the clock), or None when it overran."""
    return await _workers.call(is_equivalent, expected, text, timeout_s=timeout_s, before=(_ready,))
