"""Responses API ⇄ Chat Completions, in both directions, for requests and for responses.

Agents and environments speak the Responses API (NeMo Gym's choice); many
endpoints and every chat template speak Chat Completions. The mapping:

| Responses                                  | Chat Completions                                   |
|--------------------------------------------|----------------------------------------------------|
| `instructions`, system/developer messages  | `system` messages                                  |
| user / assistant `message` items           | `user` / `assistant` messages                      |
| `function_call` items                      | an assistant message's `tool_calls`                |
| `function_call_output` items               | `role: tool` messages (`tool_call_id`)             |
| `reasoning` items                          | `<think>…</think>` before the assistant's content  |
| tools `{type, name, parameters, …}`        | tools `{type: function, function: {name, …}}`      |
| `max_output_tokens`                        | `max_tokens`                                       |
| `status: incomplete` (`max_output_tokens`) | `finish_reason: length`                            |
| usage `input_tokens` / `output_tokens`     | usage `prompt_tokens` / `completion_tokens`        |
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from gym_serve.wire.pieces import assistant_message, input_items, usage
from gym_serve.wire.tokens import TOKEN_FIELDS

__all__ = [
    "chat_request_to_responses",
    "chat_response_to_responses",
    "responses_request_to_chat",
    "responses_response_to_chat",
    "split_think",
]

_SAMPLING = ("temperature", "top_p", "seed", "stop", "parallel_tool_calls", "tool_choice")
_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.S)


def split_think(text: str) -> tuple[str | None, str]:
    """`<think>r</think>answer` → (`r`, `answer`); text without a think block → (None, text)."""
    match = _THINK.match(text)
    if not match:
        return None, text
    return match.group(1).strip(), text[match.end() :]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


# ---- requests -------------------------------------------------------------------------------------------------


def responses_request_to_chat(params: dict[str, Any]) -> dict[str, Any]:
    """A Responses create request as a Chat Completions request."""
    messages: list[dict[str, Any]] = []
    if params.get("instructions"):
        messages.append({"role": "system", "content": params["instructions"]})
    items = input_items(params.get("input", []))
    pending_reasoning: str | None = None
    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning":
            pending_reasoning = "\n".join(part.get("text", "") for part in item.get("summary", []))
        elif kind == "message":
            role = item.get("role", "user")
            text = _text(item.get("content"))
            if role == "assistant":
                assistant = _open_assistant(messages, pending_reasoning, force_new=True)
                assistant["content"] = (assistant["content"] or "") + text
                pending_reasoning = None
            else:
                messages.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "function_call":
            assistant = _open_assistant(messages, pending_reasoning, force_new=pending_reasoning is not None)
            pending_reasoning = None
            assistant.setdefault("tool_calls", []).append(
                {
                    "id": item.get("call_id", ""),
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments", "")},
                }
            )
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id", ""), "content": _text(item.get("output"))}
            )
    request: dict[str, Any] = {"messages": messages}
    if params.get("model"):
        request["model"] = params["model"]
    if params.get("tools"):
        request["tools"] = [_chat_tool(tool) for tool in params["tools"]]
    if params.get("max_output_tokens") is not None:
        request["max_tokens"] = params["max_output_tokens"]
    for key in _SAMPLING:
        if params.get(key) is not None:
            request[key] = params[key]
    return request


def _open_assistant(messages: list[dict[str, Any]], reasoning: str | None, *, force_new: bool) -> dict[str, Any]:
    """The assistant message a new item belongs to: the last one if the turn is still open, else a new one."""
    last = messages[-1] if messages else None
    if force_new or last is None or last["role"] != "assistant":
        content = f"<think>{reasoning}</think>" if reasoning is not None else None
        last = {"role": "assistant", "content": content}
        messages.append(last)
    return last


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
    return {"type": "function", "function": function}


def chat_request_to_responses(request: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request as a Responses create request."""
    items: list[dict[str, Any]] = []
    for message in request.get("messages", []):
        role = message["role"]
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id", ""),
                    "output": _text(message.get("content")),
                }
            )
            continue
        text = _text(message.get("content"))
        if role == "assistant":
            first = len(items)
            reasoning, text = split_think(text)
            if reasoning is not None:
                items.append(_reasoning_item(reasoning))
            if text:
                items.append(_output_message(text))
            for call in message.get("tool_calls") or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id", ""),
                        "name": call["function"]["name"],
                        "arguments": call["function"].get("arguments", ""),
                    }
                )
            bundle = {field: message[field] for field in TOKEN_FIELDS if field in message}
            if bundle:  # a turn's token ids ride on its last item, so the next call can extend them
                if len(items) == first:
                    items.append(_output_message(""))
                items[-1].update(bundle)
        else:
            items.append({"type": "message", "role": role, "content": text})
    params: dict[str, Any] = {"input": items}
    if request.get("model"):
        params["model"] = request["model"]
    if request.get("tools"):
        params["tools"] = [{"type": "function", **tool["function"]} for tool in request["tools"]]
    max_tokens = request.get("max_completion_tokens", request.get("max_tokens"))
    if max_tokens is not None:
        params["max_output_tokens"] = max_tokens
    for key in _SAMPLING:
        if request.get(key) is not None:
            params[key] = request[key]
    return params


# ---- responses ------------------------------------------------------------------------------------------------


def chat_response_to_responses(completion: dict[str, Any], *, tool_calls_in_text: bool = False) -> dict[str, Any]:
    """A Chat Completions response (first choice) as a Responses object."""
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    text = message.get("content") or ""
    if reasoning is None:
        reasoning, text = split_think(text)
    if reasoning:
        output.append(_reasoning_item(reasoning))
    if text.strip():
        output.append(_output_message(text))
    for call in message.get("tool_calls") or []:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:12]}",
                "call_id": call.get("id", ""),
                "name": call["function"]["name"],
                "arguments": call["function"].get("arguments", ""),
                "status": "completed",
            }
        )
    response: dict[str, Any] = {
        "id": completion.get("id", f"resp_{uuid.uuid4().hex}"),
        "object": "response",
        "created_at": completion.get("created", time.time()),
        "model": completion.get("model"),
        "status": "completed",
        "output": output,
        "usage": _usage(completion.get("usage") or {}),
    }
    if choice.get("finish_reason") == "length":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    return response


def responses_response_to_chat(response: dict[str, Any]) -> dict[str, Any]:
    """A Responses object as a Chat Completions response (one choice)."""
    reasoning = [
        part.get("text", "")
        for item in response.get("output", [])
        if item.get("type") == "reasoning"
        for part in item.get("summary", [])
    ]
    texts = [_text(item.get("content")) for item in response.get("output", []) if item.get("type") == "message"]
    calls = [
        {
            "id": item.get("call_id", ""),
            "type": "function",
            "function": {"name": item["name"], "arguments": item.get("arguments", "")},
        }
        for item in response.get("output", [])
        if item.get("type") == "function_call"
    ]
    content = "".join(texts)
    if reasoning:
        content = f"<think>{chr(10).join(reasoning)}</think>{content}"
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = calls
    incomplete = response.get("status") == "incomplete"
    usage = response.get("usage") or {}
    return {
        "id": response.get("id", ""),
        "object": "chat.completion",
        "created": int(response.get("created_at") or time.time()),
        "model": response.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "length" if incomplete else ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": usage.get("input_tokens", 0),
            "completion_tokens": usage.get("output_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
        },
    }


def _reasoning_item(text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{uuid.uuid4().hex[:12]}",
        "summary": [{"type": "summary_text", "text": text}],
    }


def _output_message(text: str) -> dict[str, Any]:
    return assistant_message(text, f"msg_{uuid.uuid4().hex[:12]}")


def _usage(counted: dict[str, Any]) -> dict[str, Any]:
    """Chat's usage counts as a Responses `usage` (its total as the provider gives it)."""
    prompt, completion = counted.get("prompt_tokens", 0), counted.get("completion_tokens", 0)
    return {**usage(prompt, completion), "total_tokens": counted.get("total_tokens", prompt + completion)}
