"""The small pieces every wire format builds, written once: a conversation's input items, a usage block, an
assistant message, the dotted path of a field a validator refused.

Examples:
    >>> input_items("hi")
    [{'type': 'message', 'role': 'user', 'content': 'hi'}]
    >>> usage(12, 3)["total_tokens"]
    15
    >>> field_path(("rows", 1, "responses_create_params", "input"))
    'rows.1.responses_create_params.input'
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["assistant_message", "field_path", "function_call", "input_items", "usage", "user_message"]


def user_message(text: str) -> dict[str, Any]:
    """A user message item, as a bare-string `input` means it."""
    return {"type": "message", "role": "user", "content": text}


def input_items(value: str | Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Responses `input` as a list of items: a bare string is one user message."""
    return [user_message(value)] if isinstance(value, str) else list(value)


def usage(
    input_tokens: int = 0, output_tokens: int = 0, *, cached_tokens: int = 0, reasoning_tokens: int = 0
) -> dict[str, Any]:
    """A Responses `usage` block (all zeros when nothing was counted)."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def assistant_message(text: str, item_id: str) -> dict[str, Any]:
    """A completed assistant message item holding `text`."""
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A completed function call item: the model calling tool `name` with `arguments`."""
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments, separators=(",", ":")),
        "status": "completed",
    }


def field_path(loc: Iterable[int | str]) -> str:
    """A pydantic error's location as the dotted field path messages name (`input.2.role`); '' for the whole."""
    return ".".join(str(part) for part in loc)
