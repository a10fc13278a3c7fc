"""Non-answers: texts that answer nothing, whatever the task asked. A verifier must score them 0.

A policy learns whatever earns reward; a verifier that pays for an empty reply, a refusal,
the question echoed back, or a stand-in model's "no recording" message teaches exactly that.
Most verifiers give these 0 on their own (no box, no JSON, no tool call); those whose checks a
non-answer can satisfy by accident (instruction following: "i don't know" is all lowercase and
under 50 words; an LLM judge; a no-call answer in function calling) ask `is_non_answer` first.
`gym-serve env test` checks every environment against `non_answers()`.
"""

from __future__ import annotations

import re

__all__ = ["REFUSALS", "REPLAY_MISS_PREFIX", "is_non_answer", "non_answers"]

REPLAY_MISS_PREFIX = "[replay model] No recording matches this conversation"
"""How gym-serve's replay model begins its reply to a conversation it has no recording of."""

REFUSALS = frozenset(
    {
        "i don't know",
        "i do not know",
        "i dont know",
        "don't know",
        "dunno",
        "i'm not sure",
        "i am not sure",
        "not sure",
        "no idea",
        "i have no idea",
        "unknown",
        "n/a",
        "none",
        "i cannot answer",
        "i can't answer",
        "i cannot answer that",
        "i can't answer that",
        "i can't help with that",
        "i cannot help with that",
        "sorry, i don't know",
        "sorry, i can't help with that",
    }
)


def _normal(text: str) -> str:
    text = text.replace("\u2019", "'").lower()
    return " ".join(re.sub(r"[\s]+", " ", text).split()).strip(" .!?\"'`*")


def is_non_answer(text: str, question: str | None = None) -> bool:
    """True for an empty or blank text, a bare refusal, the question echoed back, or the replay model's miss."""
    normal = _normal(text)
    if not normal or normal in REFUSALS or text.lstrip().startswith(REPLAY_MISS_PREFIX):
        return True
    if question:
        asked = _normal(question)
        return bool(asked) and (normal == asked or (asked in normal and len(normal) <= len(asked) * 1.1 + 10))
    return False


def non_answers(question: str) -> dict[str, str]:
    """The non-answers every verifier is held to (`gym-serve env test`), for a task asking `question`."""
    return {
        "empty": "",
        "blank": "  \n ",
        "refusal": "I don't know.",
        "echo": question,
        "replay_miss": f"{REPLAY_MISS_PREFIX} (key 0123456789ab, 2 items). The replay model answers only "
        "conversations recorded in: example_rollouts.jsonl.",
    }
