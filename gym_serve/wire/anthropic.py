"""Anthropic Messages ⇄ the Responses API: what the gateway speaks to harnesses built on Anthropic's API.

| Anthropic Messages                              | Responses                                         |
|-------------------------------------------------|---------------------------------------------------|
| `system` (a string or text blocks)              | `instructions`                                    |
| a `user` message's text blocks                  | a user `message` item                             |
| a `user` message's `tool_result` blocks         | `function_call_output` items (`tool_use_id`)      |
| an `assistant` message's `thinking` blocks      | `reasoning` items                                 |
| its `text` blocks / `tool_use` blocks           | an assistant `message` / `function_call` items    |
| a `system` message among `messages`             | a system `message` item                           |
| tools `{name, description, input_schema}`       | tools `{type: function, name, parameters}`        |
| `tool_choice` `auto` / `any` / `tool` / `none`  | `auto` / `required` / `{type: function, name}` / `none` |
| `max_tokens`                                    | `max_output_tokens`                               |
| `stop_reason` `tool_use` / `max_tokens` / `end_turn` | a function call / `incomplete` / otherwise   |

A request this model tier cannot honour (images, documents, Anthropic's server tools) is refused with a
`Refused` naming the field, which the gateway answers as a 400 in Anthropic's error shape.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gym_serve.wire.refused import Refused

__all__ = [
    "anthropic_error",
    "anthropic_request_to_responses",
    "responses_response_to_anthropic",
    "tool_input",
]


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """An error body in Anthropic's shape, which its SDK reads (`error.type`, `error.message`)."""
    return {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}


def anthropic_request_to_responses(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as a Responses request; raises `Refused` for what the tier cannot honour."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused("messages", "a Messages request needs a non-empty `messages` list")
    items: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        items.extend(_message_items(message, f"messages.{i}"))
    request: dict[str, Any] = {"input": items}
    system = _system_text(body.get("system"))
    if system:
        request["instructions"] = system
    if body.get("tools"):
        request["tools"] = [_tool(tool, f"tools.{i}") for i, tool in enumerate(body["tools"])]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        request["tool_choice"] = choice
    if body.get("max_tokens") is not None:
        request["max_output_tokens"] = body["max_tokens"]
    for key in ("temperature", "top_p", "model"):
        if body.get(key) is not None:
            request[key] = body[key]
    return request


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(block.get("text", "") for block in system if isinstance(block, dict))
    raise Refused("system", "must be a string or a list of text blocks")


def _message_items(message: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        raise Refused(f"{where}.role", "a message's role is `user`, `assistant` or `system`")
    role, content = message["role"], message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise Refused(f"{where}.content", "must be a string or a list of content blocks")
    if role == "assistant":
        return [_assistant_item(block, f"{where}.content.{j}") for j, block in enumerate(blocks)]
    items: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": role, "content": "\n".join(texts)})
            texts.clear()

    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_result" and role == "user":
            flush()
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(block.get("tool_use_id", "")),
                    "output": _block_text(block.get("content"), f"{where}.content.{j}.content"),
                }
            )
        else:
            raise Refused(f"{where}.content.{j}", f"content blocks of type `{kind}` are not supported by this model")
    flush()
    return items


def _assistant_item(block: Any, where: str) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return {"type": "message", "role": "assistant", "content": str(block.get("text", ""))}
    if kind == "tool_use":
        return {
            "type": "function_call",
            "call_id": str(block.get("id", "")),
            "name": str(block.get("name", "")),
            "arguments": json.dumps(block.get("input") or {}),
        }
    if kind in ("thinking", "redacted_thinking"):
        text = str(block.get("thinking", ""))
        return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
    raise Refused(where, f"assistant content blocks of type `{kind}` are not supported by this model")


def _block_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "".join(str(b.get("text", "")) for b in content)
    raise Refused(where, "a tool result's content must be text (images are not supported by this model)")


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise Refused(where, "a tool is `{name, description, input_schema}`")
    if tool.get("type") not in (None, "custom"):
        raise Refused(
            f"{where}.type",
            f"`{tool['type']}` is one of Anthropic's server tools, which this model tier does not run; "
            "declare the tool with an `input_schema` instead",
        )
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise Refused(f"{where}.input_schema", "a tool needs an `input_schema` object")
    parameters = {k: v for k, v in schema.items() if k != "$schema"}
    return {"type": "function", "name": tool["name"], "description": tool.get("description"), "parameters": parameters}


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "name": choice.get("name")}
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
    if mapped is None:
        raise Refused("tool_choice.type", f"expected auto, any, tool or none; got {kind!r}")
    return mapped


def tool_input(arguments: str) -> dict[str, Any]:
    """A function call's arguments as a `tool_use` block's `input` (an object; other JSON is wrapped).

    >>> tool_input('{"city": "Paris"}'), tool_input("[1]"), tool_input("not json")
    ({'city': 'Paris'}, {'arguments': [1]}, {'arguments': 'not json'})
    """
    try:
        parsed = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def responses_response_to_anthropic(response: dict[str, Any], model: str) -> dict[str, Any]:
    """A Responses object as a Messages response."""
    blocks: list[dict[str, Any]] = []
    calls = False
    for item in response.get("output") or []:
        kind = item.get("type")
        if kind == "reasoning":
            text = "".join(part.get("text", "") for part in item.get("summary") or [])
            blocks.append({"type": "thinking", "thinking": text, "signature": ""})
        elif kind == "message":
            text = "".join(part.get("text", "") for part in item.get("content") or [] if isinstance(part, dict))
            if text:
                blocks.append({"type": "text", "text": text})
        elif kind == "function_call":
            calls = True
            call = {"type": "tool_use", "id": item.get("call_id", ""), "name": item.get("name", "")}
            blocks.append({**call, "input": tool_input(item.get("arguments", ""))})
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    stop = "max_tokens" if response.get("status") == "incomplete" else ("tool_use" if calls else "end_turn")
    usage = response.get("usage") or {}
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(usage.get("input_tokens") or 0),
            "output_tokens": int(usage.get("output_tokens") or 0),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0),
        },
    }
