"""What the gateway takes of each API a harness speaks, and what it answers: one Responses request for the tier.

A harness calls its session in OpenAI Chat Completions (`chat`), OpenAI Responses (`responses`) or Anthropic
Messages (`anthropic`). Each request becomes one Responses request for the Model tier (`tier_request`), and
the tier's answer goes back in the harness's API (`api_response`; streamed, `gym_serve.wire.streaming`).

What the tier cannot honour is refused with a `Refused` naming the field, never silently dropped: several
choices (`n > 1`), tools that are not functions (built-in or server tools), content other than text,
stored-conversation features (`previous_response_id`, `conversation`), output formats other than text and
JSON (a JSON schema is structured outputs: the tier constrains its sampling to it). Token ids never cross
this boundary: the answer's items lose their token bundles (`public_items`), and any a harness sends back
are dropped, so a harness can neither read nor forge what the gateway records server-side.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from gym_serve.wire.anthropic import anthropic_request_to_responses, responses_response_to_anthropic
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat
from gym_serve.wire.pieces import input_items
from gym_serve.wire.refused import Refused
from gym_serve.wire.tokens import POLICY_VERSION, POLICY_VERSION_SPANS, TOKEN_FIELDS

__all__ = ["API", "PRIVATE_KEYS", "Refused", "api_response", "public_items", "responses_object", "tier_request"]

API = Literal["chat", "responses", "anthropic"]

PRIVATE_KEYS = frozenset({*TOKEN_FIELDS, POLICY_VERSION, POLICY_VERSION_SPANS, "weight_versions"})
"""Keys of an output item that the gateway records and never shows a harness (nor takes from one)."""

_CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}
_ITEM_TYPES = {"message", "function_call", "function_call_output", "reasoning"}
_TEXT_PARTS = {"text", "input_text", "output_text", "summary_text"}
_RESPONSES_FIELDS = (
    "model", "instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p",
    "max_output_tokens", "text", "reasoning", "metadata",
)  # fmt: skip
"""What the tier gets of a Responses request (the rest is the API's bookkeeping, or what this tier refuses)."""
_FORMATS = ("text", "json_schema", "json_object")
"""Output formats the tier honours (`gym_serve.wire.hermes.structured_output`)."""


def tier_request(api: API, body: dict[str, Any]) -> dict[str, Any]:
    """The Responses request a harness's `body` stands for; raises `Refused` naming what the tier cannot do."""
    if api == "chat":
        return _chat(body)
    if api == "responses":
        return _responses(body)
    return anthropic_request_to_responses(body)


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused("messages", "a Chat Completions request needs a non-empty `messages` list")
    if body.get("n") not in (None, 1):
        raise Refused("n", f"this gateway samples one choice per call; `n` must be 1, got {body['n']!r}")
    if body.get("functions") is not None or body.get("function_call") is not None:
        raise Refused("functions", "legacy `functions` are not supported; declare `tools` of type `function`")
    wanted = body.get("response_format") or {"type": "text"}
    if wanted.get("type") not in _FORMATS:
        raise Refused("response_format.type", f"expected one of {', '.join(_FORMATS)}, got {wanted.get('type')!r}")
    clean = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _CHAT_ROLES:
            raise Refused(f"messages.{i}.role", f"a message's role is one of {', '.join(sorted(_CHAT_ROLES))}")
        _text_only(message.get("content"), f"messages.{i}.content")
        clean.append({k: v for k, v in message.items() if k not in PRIVATE_KEYS})
    for i, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict) or not function.get("name"):
            raise Refused(f"tools.{i}", "a tool is `{type: function, function: {name, parameters}}`")
    request = chat_request_to_responses({**body, "messages": clean})
    if wanted["type"] != "text":  # Chat's structured outputs, as the Responses API says them
        request["text"] = {"format": {"type": wanted["type"], **(wanted.get("json_schema") or {})}}
    choice = body.get("tool_choice")
    if isinstance(choice, dict):  # Chat names the function one level down
        request["tool_choice"] = {"type": "function", "name": (choice.get("function") or {}).get("name")}
    return request


def _responses(body: dict[str, Any]) -> dict[str, Any]:
    given = body.get("input")
    if not isinstance(given, str | list) or not given:
        raise Refused("input", "a Responses request needs `input`: a string or a non-empty list of items")
    for field in ("previous_response_id", "conversation", "prompt"):
        if body.get(field) is not None:
            raise Refused(field, "this gateway stores no responses; send the whole conversation in `input`")
    if body.get("background"):
        raise Refused("background", "background responses are not supported")
    items = []
    for i, item in enumerate(input_items(given)):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind not in _ITEM_TYPES:
            raise Refused(f"input.{i}.type", f"items of type `{kind}` are not supported by this model tier")
        _text_only(item.get("content"), f"input.{i}.content")
        items.append({k: v for k, v in item.items() if k not in PRIVATE_KEYS})
    wanted = ((body.get("text") or {}).get("format") or {}).get("type", "text")
    if wanted not in _FORMATS:
        raise Refused("text.format.type", f"expected one of {', '.join(_FORMATS)}, got {wanted!r}")
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not tool.get("name"):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise Refused(
                f"tools.{i}.type", f"only `function` tools are served (this model tier runs no `{kind}` tool)"
            )
    return {**{k: body[k] for k in _RESPONSES_FIELDS if body.get(k) is not None}, "input": items}


def _text_only(content: Any, where: str) -> None:
    """Message content this tier reads: a string, or parts that are text."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise Refused(where, "must be a string or a list of text parts")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            raise Refused(f"{where}.{j}.type", f"`{kind}` content is not supported by this model tier (text only)")


def public_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output items as a harness may see them: without the token bundle the gateway keeps."""
    return [{k: v for k, v in item.items() if k not in PRIVATE_KEYS} for item in items]


def responses_object(response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """A complete Responses object (the fields the official clients read), the items public."""
    status = response.get("status") or "completed"
    return {
        "id": response.get("id") or f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(response.get("created_at") or time.time()),
        "status": status,
        "error": None,
        "incomplete_details": response.get("incomplete_details"),
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": response.get("model") or request.get("model") or "",
        "output": public_items(response.get("output") or []),
        "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": request.get("temperature"),
        "text": {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": response.get("usage"),
        "metadata": request.get("metadata") or {},
    }


def api_response(api: API, response: dict[str, Any], request: dict[str, Any], model: str) -> dict[str, Any]:
    """The tier's answer to `request` in the harness's API, under the session's model name."""
    response = {**response, "model": model, "output": public_items(response.get("output") or [])}
    if api == "chat":
        return responses_response_to_chat(response)
    if api == "responses":
        return responses_object(response, request)
    return responses_response_to_anthropic(response, model)
