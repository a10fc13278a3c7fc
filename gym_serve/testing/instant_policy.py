"""A stand-in policy for three tasks, deterministic and instant: what the instant OpenAI server answers.

One function of the conversation so far, so a rollout's reward depends on its row alone (a run disturbed by
faults must end where an undisturbed one does):

- the weather task (`example_single_tool_call`, multi-turn with a tool): call `get_weather` for the city the
  user names (or ask which city), then answer with the tool's own description, which its verifier pays;
- multiple choice (`multiple_choice`, single turn): `\\boxed{X}`, the letter chosen by a hash of the question
  (right about one time in four);
- customer support (`simulated_user`, multi-turn with a simulated user): ask for the order number, then close
  with `RESOLUTION: refund for order <the id the user gave>` (right for the refund cases).

Example:
    >>> user = {"type": "message", "role": "user"}
    >>> respond([{**user, "content": "what's it like in sf?"}])["name"]
    'get_weather'
    >>> respond([{**user, "content": "A) x\\nB) y\\nAnswer as \\\\boxed{LETTER}."}])["content"][0]["text"]
    'The answer is \\\\boxed{A}.'
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import orjson

from gym_serve.wire.pieces import assistant_message

__all__ = ["city_of", "respond"]

_ALIASES = {"sf": "San Francisco", "nyc": "New York", "la": "Los Angeles"}
_CITY = re.compile(r"\bin ((?:[A-Z][\w'-]*)(?: [A-Z][\w'-]*)*)")
_ORDER = re.compile(r"\b[A-Z]-\d{4}\b")


def city_of(question: str) -> str | None:
    """The city a weather question names, if any.

    >>> city_of("should I bring an umbrella in Seattle today?"), city_of("what's it like in sf?")
    ('Seattle', 'San Francisco')
    >>> city_of("how's the outside?") is None
    True
    """
    for word in re.findall(r"[a-z]+", question.lower()):
        if word in _ALIASES:
            return _ALIASES[word]
    match = _CITY.search(question)
    return match.group(1) if match else None


def respond(items: list[dict[str, Any]], instructions: str | None = None, *, n: int = 0) -> dict[str, Any]:
    """The one output item the policy gives for a conversation (`n` numbers its ids)."""
    outputs = [item for item in items if item.get("type") == "function_call_output"]
    if outputs:
        return _message(n, _weather_answer(text_of(outputs[-1].get("output"))))
    said = [text_of(item.get("content")) for item in items if item.get("type", "message") == "message"]
    if "RESOLUTION:" in " ".join([instructions or "", *said]):
        return _message(n, _support_turn(items))
    question = next((text_of(i.get("content")) for i in reversed(items) if i.get("role") == "user"), "")
    if "\\boxed{" in question:
        return _message(n, f"The answer is \\boxed{{{'ABCD'[zlib.crc32(question.encode()) % 4]}}}.")
    city = city_of(question)
    if city is None:
        return _message(n, "Which city are you in? Tell me and I'll check the weather there.")
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": "get_weather",
        "arguments": orjson.dumps({"city": city}).decode(),
        "status": "completed",
    }


def text_of(content: Any) -> str:
    """A message's or tool output's text, whether a string or a list of parts."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _weather_answer(tool_output: str) -> str:
    """The final answer: the tool's own weather description, which the weather verifier rewards."""
    try:
        return f"{orjson.loads(tool_output)['weather_description']} Dress for it and have a good time!"
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"The weather service said: {tool_output}"


def _support_turn(items: list[dict[str, Any]]) -> str:
    """Ask for the order number once; after the user's answer, close the case with it."""
    if not any(item.get("role") == "assistant" for item in items):
        return "I'm sorry to hear that. Could you give me your order number?"
    users = " ".join(text_of(item.get("content")) for item in items if item.get("role") == "user")
    order = _ORDER.search(users)
    return f"Thank you.\nRESOLUTION: refund for order {order.group(0) if order else 'unknown'}"


def _message(n: int, text: str) -> dict[str, Any]:
    return assistant_message(text, f"msg_{n}")
