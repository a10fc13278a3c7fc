"""Non-answers: texts that answer nothing, whatever the task asked. A verifier must score them 0.

A policy learns whatever earns reward; a verifier that pays for an empty reply, a refusal,
the question echoed back, JSON with nothing in it, or a stand-in model's "no recording" message
teaches exactly that. Most verifiers give these 0 on their own (no box, no JSON, no tool call);
those whose checks a non-answer can satisfy by accident (instruction following: "i don't know"
is all lowercase and under 50 words, and `{"keyword": null}` is JSON holding the keyword; an LLM
judge; a no-call answer in function calling) ask `is_non_answer` first. `gym-serve env test`
checks every environment against `non_answers()`.

An echo is judged by what it adds, not by its length: every copy of the question (case,
spacing and punctuation aside) is taken out of the answer, and what is left must not be a
non-answer itself. `without_echo` gives that remainder to a verifier that checks it instead.
JSON is content-free (`is_content_free`) when every value in it, at any depth, is null, a blank
string or an empty array or object: its keys are not content (they can spell out any keyword).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["REFUSALS", "REPLAY_MISS_PREFIX", "is_content_free", "is_non_answer", "non_answers", "without_echo"]

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
_JSON_WORDS = 200  # keys of the JSON-shaped non-answers: the question's distinct words, at most this many


def _normal(text: str) -> str:
    text = text.replace("\u2019", "'").lower()
    return " ".join(re.sub(r"[\s]+", " ", text).split()).strip(" .!?\"'`*")


def _refusal(normal: str) -> bool:
    """Only refusals: every sentence of it is one ("I don't know. No idea.")."""
    sentences = [s.strip(" \"'`*") for s in re.split(r"[.!?;\n]+", normal)]
    return any(sentences) and all(s in REFUSALS for s in sentences if s)


def is_content_free(value: Any) -> bool:
    """True for a JSON value whose every leaf is null, a blank string, or an empty array or object (keys aside)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    if isinstance(value, dict):
        return all(is_content_free(v) for v in value.values())
    if isinstance(value, list):
        return all(is_content_free(v) for v in value)
    return False  # a number, a boolean, a string with something in it


def _content_free_json(text: str) -> bool:
    body = re.sub(r"^```[a-zA-Z]*\s*", "", text.strip())  # the closing fence without `\s*```$`: quadratic on blanks
    if body.endswith("```"):
        body = body[:-3].rstrip()
    if not body.startswith(("{", "[")):
        return False
    try:
        return is_content_free(json.loads(body))
    except (ValueError, RecursionError):
        return False


def without_echo(text: str, question: str) -> str:
    """`text` with every copy of `question` in it taken out (case, spacing and punctuation aside)."""
    words = re.findall(r"\w+", question)
    if not words:
        return text
    return re.sub(r"\W+".join(map(re.escape, words)), " ", text, flags=re.I)


def is_non_answer(text: str, question: str | None = None) -> bool:
    """True for an empty or blank text, refusals only, content-free JSON, the replay model's miss, or the question
    echoed back with nothing of substance added (what is left once it is taken out is itself a non-answer)."""
    normal = _normal(text)
    if not normal or _refusal(normal) or text.lstrip().startswith(REPLAY_MISS_PREFIX) or _content_free_json(text):
        return True
    if question:
        rest = without_echo(text, question)
        return rest != text and is_non_answer(rest)
    return False


def non_answers(question: str) -> dict[str, str]:
    """The non-answers every verifier is held to (`gym-serve env test`), for a task asking `question`."""
    keys = list(dict.fromkeys(re.findall(r"\w+", question)))[:_JSON_WORDS] or ["answer"]
    return {
        "empty": "",
        "blank": "  \n ",
        "refusal": "I don't know.",
        "echo": question,
        "echo_padded": f"{question}\n\nI don't know. I'm not sure. No idea.",
        "replay_miss": f"{REPLAY_MISS_PREFIX} (key 0123456789ab, 2 items). The replay model answers only "
        "conversations recorded in: example_rollouts.jsonl.",
        "json_empty_object": "{}",
        "json_empty_array": "[]",
        "json_all_null": json.dumps(dict.fromkeys(keys)),
        "json_all_empty": json.dumps(dict.fromkeys(keys, "")),
    }
