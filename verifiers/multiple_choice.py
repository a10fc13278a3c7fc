"""Multiple-choice answers: which option letter the model chose, strictly or leniently.

- strict: only `\\boxed{X}` or a final line `Answer: X` counts.
- lenient: also a lone letter (`B`, `(B)`, `B.`) on the last non-empty line, or the
  text of exactly one option appearing in the answer.

An answer that names two or more different options (`\\boxed{A} or \\boxed{C}`,
`Answer: A, C`) gets no letter: a policy must not be rewarded for hedging.
"""

from __future__ import annotations

import re

__all__ = ["extract_choice", "verify_choice"]

_BOXED = re.compile(r"\\boxed\{\s*\(?([A-Z])\)?\s*\}")
_ANSWER_LINE = re.compile(r"^\s*\**answer\**\s*[:：]\s*\**\s*(.+?)\s*$", re.I | re.M)
_LETTER = re.compile(r"\b\(?([A-Z])\)?(?=[\s.,;:)]|$)")
_LONE = re.compile(r"^\s*\(?([A-Z])\)?[.)]?\s*$")


def extract_choice(text: str, options: dict[str, str], *, strict: bool = True) -> str | None:
    """The single option letter the answer chose, or None (nothing chosen, or more than one)."""
    letters = set(options)
    boxed = {m for m in _BOXED.findall(text) if m in letters}
    if boxed:
        return boxed.pop() if len(boxed) == 1 else None
    lines = _ANSWER_LINE.findall(text)
    if lines:
        named = {m for m in _LETTER.findall(lines[-1]) if m in letters}
        return named.pop() if len(named) == 1 else None
    if strict:
        return None
    last = next((line for line in reversed(text.strip().splitlines()) if line.strip()), "")
    lone = _LONE.match(last)
    if lone and lone.group(1) in letters:
        return lone.group(1)
    quoted = {letter for letter, option in options.items() if option and option.lower() in text.lower()}
    return quoted.pop() if len(quoted) == 1 else None


def verify_choice(
    text: str, options: dict[str, str], expected: str, *, strict: bool = True
) -> tuple[float, str | None]:
    """(reward, chosen letter): 1.0 only for exactly the expected option."""
    chosen = extract_choice(text, options, strict=strict)
    return (1.0 if chosen == expected.strip().upper() else 0.0), chosen
