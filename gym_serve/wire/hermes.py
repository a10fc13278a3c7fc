"""Model text → Responses output items: `<think>` reasoning and Hermes/Qwen `<tool_call>` blocks.

    <think>I should look it up.</think>
    <tool_call>{"name": "get_weather", "arguments": {"city": "SF"}}</tool_call>

becomes a `reasoning` item and a `function_call` item; any other text becomes
an assistant `message`. A `<tool_call>` block that is not valid JSON stays in
the message text, where the environment's verifier (and the trainer) can see
the model's mistake, instead of being dropped.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from gym_serve.wire.chat import split_think

__all__ = ["parse_output", "render_tool_call"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_output(text: str) -> list[dict[str, Any]]:
    """The output items a model's generated text stands for.

    >>> text = '<think>Look it up.</think><tool_call>{"name": "get_weather", "arguments": {"city": "SF"}}</tool_call>'
    >>> [(item["type"], item.get("name"), item.get("arguments")) for item in parse_output(text)]
    [('reasoning', None, None), ('function_call', 'get_weather', '{"city": "SF"}')]
    >>> parse_output('<tool_call>{"name": oops}</tool_call>')[0]["content"][0]["text"]  # malformed: kept in sight
    '<tool_call>{"name": oops}</tool_call>'
    """
    items: list[dict[str, Any]] = []
    reasoning, rest = split_think(text)
    if reasoning:
        items.append({"type": "reasoning", "id": _id("rs"), "summary": [{"type": "summary_text", "text": reasoning}]})
    calls: list[dict[str, Any]] = []

    def take(match: re.Match[str]) -> str:
        try:
            call = json.loads(match.group(1))
            name, arguments = call["name"], call.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError):
            return match.group(0)  # malformed: leave it visible
        calls.append(
            {
                "type": "function_call",
                "id": _id("fc"),
                "call_id": _id("call"),
                "name": str(name),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "status": "completed",
            }
        )
        return ""

    message = _TOOL_CALL.sub(take, rest).strip()
    if message:
        items.append(
            {
                "type": "message",
                "id": _id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": message, "annotations": []}],
            }
        )
    return items + calls


def render_tool_call(name: str, arguments: str) -> str:
    """A function call as the Hermes text a chat template puts in an assistant turn."""
    try:
        parsed: Any = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        parsed = arguments
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': parsed})}\n</tool_call>"


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"
