"""`stream: true` answers: a whole answer as each API's own server-sent events.

The Model tier answers whole (its token bundle is recorded once the call ends), so a streamed answer is the
complete answer written as the event sequence the API's official clients parse: Chat Completions chunks
ending in `data: [DONE]`; Responses' typed events from `response.created` to `response.completed`;
Anthropic's `message_start`, content blocks with their deltas, `message_delta`, `message_stop`. A harness
that streams sees the same answer, in its own format, as one that does not.

>>> events = chat_chunks({"id": "c1", "created": 1, "model": "m", "choices": [
...     {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}, usage=False)
>>> [e.decode().strip() for e in events][-1]
'data: [DONE]'
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["anthropic_events", "chat_chunks", "responses_events", "sse"]


def sse(data: Any, event: str | None = None) -> bytes:
    r"""One server-sent event; `data` as compact JSON (orjson, as the gateway's whole answers are written).

    >>> sse({"type": "message_stop", "text": "é"}, "message_stop").decode()
    'event: message_stop\ndata: {"type":"message_stop","text":"é"}\n\n'
    """
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def chat_chunks(completion: dict[str, Any], *, usage: bool) -> list[bytes]:
    """A chat completion as `chat.completion.chunk`s: the role, the text, each tool call, the finish, [usage]."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    base["model"] = completion["model"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        events.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        events.append(chunk({"tool_calls": [{"index": index, **call}]}))
    events.append(chunk({}, choice["finish_reason"]))
    if usage:
        events.append(sse({**base, "choices": [], "usage": completion["usage"]}))
    events.append(b"data: [DONE]\n\n")
    return events


def responses_events(response: dict[str, Any]) -> list[bytes]:
    """A Responses object as the API's typed stream events, numbered in `sequence_number`."""
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(sse({"type": kind, "sequence_number": len(events), **fields}, event=kind))

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    for index, item in enumerate(response["output"]):
        _item_events(emit, index, item)
    done = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(response["status"])
    emit(done or "response.failed", response=response)
    return events


def _item_events(emit: Any, index: int, item: dict[str, Any]) -> None:
    item_id = item.get("id") or f"item_{index}"
    item = {**item, "id": item_id}
    kind = item.get("type")
    if kind == "message":
        emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
        for part_index, part in enumerate(item.get("content") or []):
            at = {"item_id": item_id, "output_index": index, "content_index": part_index}
            emit("response.content_part.added", **at, part={**part, "text": ""})
            emit("response.output_text.delta", **at, delta=part.get("text", ""), logprobs=[])
            emit("response.output_text.done", **at, text=part.get("text", ""), logprobs=[])
            emit("response.content_part.done", **at, part=part)
    elif kind == "function_call":
        emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
        at = {"item_id": item_id, "output_index": index}
        emit("response.function_call_arguments.delta", **at, delta=item.get("arguments", ""))
        emit("response.function_call_arguments.done", **at, arguments=item.get("arguments", ""), name=item["name"])
    else:
        emit("response.output_item.added", output_index=index, item=item)
    emit("response.output_item.done", output_index=index, item=item)


def anthropic_events(message: dict[str, Any]) -> list[bytes]:
    """A Messages response as Anthropic's stream: `message_start`, each block with its delta, the stop."""
    events = [
        sse(
            {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                  "usage": {**message["usage"], "output_tokens": 0}}},
            event="message_start",
        )
    ]  # fmt: skip
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        start: dict[str, Any]
        if kind == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        elif kind == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:  # thinking
            start = {"type": "thinking", "thinking": "", "signature": ""}
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        events.append(
            sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")
        )
        events.append(sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"))
        if kind == "thinking":
            signature = {"type": "signature_delta", "signature": block.get("signature", "")}
            events.append(
                sse({"type": "content_block_delta", "index": index, "delta": signature}, "content_block_delta")
            )
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events.append(sse({"type": "message_delta", "delta": stop, "usage": usage}, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events
