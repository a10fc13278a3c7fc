"""Multiple-choice answers: which option letter the model chose, read as NeMo Gym's `mcqa` reads it.

Options are NeMo Gym's list of one-entry objects (`[{"A": "Circle"}, {"B": "Square"}]`, or
the same as one dict); a letter counts only if it names an option with text. The text is
the answer stripped; an empty one chooses nothing. In order:

1. `output_regex` (a row's `template_metadata.output_regex`, a pattern or a list tried in
   turn): the *last* match, case-insensitive, NFKC-normalised (Arabic, Bengali and
   full-width letters read as A-D). A single letter is taken as it is (the row's regex is
   trusted); anything else must equal one option's text. Nothing found: go on to the mode.
2. the grading mode:

   - `strict_single_letter_boxed` (default): the *last* `\\boxed{...}` (braces counted;
     `\\text{...}` wrappers removed) holding one capital letter and no other letters
     (`\\boxed{B}`, `\\boxed{{B}}`, `\\boxed{(B)}`, `\\boxed{[B]}`, `\\boxed{ B }`), or a capital
     letter then `:` `)` `.` or `-` (`\\boxed{B: Square}`). `\\boxed{b}`, `\\boxed{A, B}`,
     `Answer: B` and a bare `B` choose nothing.
   - `lenient_boxed`: strict, else the one option whose text appears in the last box.
   - `lenient_answer_colon`: the first `Answer:` line's payload is exactly one letter or
     exactly one option's text (`Answer: B because ...` chooses nothing).
   - `lenient_answer_colon_md` (NeMo Gym allows it only as a server-wide setting): the
     last markdown-tolerant `Answer:` payload (or one after the row's
     `template_metadata.answer_prefix`) naming exactly one letter, of the last 64 (`_MAX_PAYLOADS`);
     lists (`A or B`) choose nothing; with an `answer_prefix`, a strict box is the fallback.

The reward is 1.0 only when the chosen letter is `expected_answer` (stripped, upper-cased).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Literal

from .math import extract_answer  # the last complete boxed answer, read as the math verifier reads it

__all__ = ["GRADING_MODES", "GradingMode", "Options", "extract_choice", "option_texts", "verify_choice"]

GradingMode = Literal["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "lenient_answer_colon_md"]
GRADING_MODES: tuple[GradingMode, ...] = (
    "strict_single_letter_boxed",
    "lenient_boxed",
    "lenient_answer_colon",
    "lenient_answer_colon_md",
)
Options = Sequence[Mapping[str, str | None]] | Mapping[str, str | None]

_ONLY_LETTER = re.compile(r"^[^A-Za-z]*([A-Z])[^A-Za-z]*$")
_LABELLED_LETTER = re.compile(r"^\s*([A-Z])\s*[:).\-]")
_TEXT_WRAPPER = re.compile(r"\\text\{\s*(.*?)\s*\}", re.S)
_ANSWER_COLON = re.compile(r"(?i)answer\s*:\s*(.+)")
_ANSWER_PAYLOAD = re.compile(r"(?im)[*_]{0,2}Answer[*_]{0,2}\s*:[*_\s]{0,2}(.+)")
_LONE_LETTER = re.compile(r"(?<![A-Za-z])([A-Za-z])(?![A-Za-z])")
_LIST_SEPARATOR = re.compile(r"(?:\s*[/|&,;]\s*|\s+(?:or|and)\s+|\s+)", re.I)
_LEADING_LETTER = re.compile(r"^([a-zA-Z])(?![a-zA-Z0-9])")
_LAST_CAPITAL = re.compile(r"\b[A-Z]\b(?!.*\b[A-Z]\b)", re.S)
_MAX_PAYLOADS = 64
"""`lenient_answer_colon_md` reads the last this many payloads. A row's `answer_prefix` payload runs to the end of
its line, so a line that repeats the prefix N times holds N overlapping payloads, and reading every one is
quadratic (35 s for a 100 kB line; NeMo Gym's server reads them all): an answer with more places than this that
names its letter only before the last ones chooses nothing."""
_LOOKALIKES = str.maketrans({"أ": " A", "ب": " B", "ج": " C", "د": " D", "অ": " A", "ব": " B", "ড": " C", "ঢ": " D"})


def option_texts(options: Options) -> dict[str, str]:
    """Letter → option text, for single-letter keys with text (NeMo Gym's allowed letters), upper-cased."""
    entries = [options] if isinstance(options, Mapping) else list(options)
    texts: dict[str, str] = {}
    for entry in entries:
        for key, text in entry.items():
            if text is not None and isinstance(key, str) and len(key) == 1 and key.isalpha():
                texts[key.upper()] = text
    return texts


def extract_choice(
    text: str,
    options: Options,
    *,
    mode: GradingMode = "strict_single_letter_boxed",
    output_regex: str | Sequence[str] | None = None,
    answer_prefix: str | None = None,
) -> str | None:
    """The option letter the answer chose, or None (see the module docstring for the rules)."""
    texts = option_texts(options)
    text = text.strip()
    if not text:
        return None
    if output_regex:
        for pattern in [output_regex] if isinstance(output_regex, str) else output_regex:
            chosen = _by_regex(text, pattern, texts)
            if chosen is not None:
                return chosen
    if mode == "strict_single_letter_boxed":
        return _boxed_letter(text, texts)
    if mode == "lenient_boxed":
        return _boxed_letter(text, texts) or _boxed_option_text(text, texts)
    if mode == "lenient_answer_colon":
        return _answer_colon(text, texts)
    if mode == "lenient_answer_colon_md":
        chosen = _answer_payload_letter(text, texts, answer_prefix)
        return chosen if chosen is not None or not answer_prefix else _boxed_letter(text, texts)
    raise ValueError(f"unknown grading mode `{mode}`; known: {', '.join(GRADING_MODES)}")


def verify_choice(text: str, options: Options, expected: str, **how: object) -> tuple[float, str | None]:
    """(reward, chosen letter): 1.0 only for exactly the expected option."""
    chosen = extract_choice(text, options, **how)  # type: ignore[arg-type]
    gold = expected.strip().upper()
    return (1.0 if chosen is not None and chosen == gold else 0.0), chosen


def _unwrap_text(value: str) -> str:
    while (match := _TEXT_WRAPPER.fullmatch(value)) is not None:
        value = match.group(1)
    return value


def _squash(value: str) -> str:
    return " ".join(value.lower().split())


def _normalize(value: str) -> str:
    value = unicodedata.normalize("NFKC", value).translate(_LOOKALIKES)
    # NFKC has already turned full-width letters into ASCII; NeMo Gym pads them with a space the same way
    return value.strip()


def _boxed_letter(text: str, texts: dict[str, str]) -> str | None:
    inner = extract_answer(text)
    if inner is None:
        return None
    inner = _unwrap_text(inner.strip())
    match = _ONLY_LETTER.match(inner) or _LABELLED_LETTER.match(inner)
    letter = match.group(1) if match else None
    return letter if letter in texts else None


def _boxed_option_text(text: str, texts: dict[str, str]) -> str | None:
    inner = extract_answer(text)
    if inner is None:
        return None
    candidates = {_squash(inner.strip()), _squash(_unwrap_text(inner.strip()))}
    found = {
        letter for letter, option in texts.items() if _squash(option) and any(_squash(option) in c for c in candidates)
    }
    return found.pop() if len(found) == 1 else None


def _option_named(candidate: str, texts: dict[str, str]) -> str | None:
    wanted = _squash(candidate)
    for letter, option in texts.items():
        if _squash(option) == wanted:
            return letter
    return None


def _by_regex(text: str, pattern: str, texts: dict[str, str]) -> str | None:
    try:
        found = re.findall(pattern, text, re.IGNORECASE)
    except re.error:  # a broken pattern in the row is ignored, as NeMo Gym does
        return None
    if not found:
        return None
    last = found[-1]
    captured = _normalize((last[0] if isinstance(last, tuple) else last).strip()).upper()
    if len(captured) == 1 and captured.isalpha():
        return captured
    return _option_named(captured, texts)


def _answer_colon(text: str, texts: dict[str, str]) -> str | None:
    match = _ANSWER_COLON.search(text)
    if match is None:
        return None
    candidate = _unwrap_text(match.group(1)).strip()
    if len(candidate) == 1 and candidate.isalpha() and candidate.upper() in texts:
        return candidate.upper()
    return _option_named(candidate, texts)


def _answer_payload_letter(text: str, texts: dict[str, str], prefix: str | None) -> str | None:
    text = unicodedata.normalize("NFKC", text)
    found = [(m.start(), m.start(1), m.end(1)) for m in _ANSWER_PAYLOAD.finditer(text)]  # (where, payload span)
    if prefix:
        for m in re.finditer(re.escape(unicodedata.normalize("NFKC", prefix)) + r"\s*", text, re.IGNORECASE):
            end = text.find("\n", m.end())
            found.append((m.start(), m.end(), end if end >= 0 else len(text)))
    # the last payload that names one letter decides, of the last `_MAX_PAYLOADS` places (ties on a place kept)
    places = sorted({where for where, _, _ in found}, reverse=True)[:_MAX_PAYLOADS]
    last = [(where, text[a:b]) for where, a, b in found if places and where >= places[-1]]
    for _, payload in sorted(last, reverse=True):
        if (letter := _payload_letter(payload, texts)) is not None:
            return letter
    return None


def _payload_letter(payload: str, texts: dict[str, str]) -> str | None:
    candidate = _normalize(payload).strip().strip("*_` \t\n\r.,;:")
    letters = [
        (m.group(1).upper(), m.span(1)) for m in _LONE_LETTER.finditer(candidate) if m.group(1).upper() in texts
    ]
    for (left, left_span), (right, right_span) in zip(letters, letters[1:], strict=False):
        if left != right and _LIST_SEPARATOR.fullmatch(candidate[left_span[1] : right_span[0]]):
            return None  # "A or B", "A, B": a list of choices is no choice
    if len(candidate) == 1:
        letter: str | None = candidate
    else:
        match = _LEADING_LETTER.match(candidate) or _LAST_CAPITAL.search(candidate)
        letter = match.group(match.lastindex or 0) if match else None
    return letter.upper() if letter and letter.upper() in texts else None
