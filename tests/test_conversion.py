"""Responses ⇄ Chat Completions: a table of cases, each converted both ways."""

from __future__ import annotations

from typing import Any

import pytest

from gym_serve.wire.chat import (
    chat_request_to_responses,
    chat_response_to_responses,
    responses_request_to_chat,
    responses_response_to_chat,
    split_think,
)

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather.",
    "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "instructions, developer and user",
        {
            "instructions": "Be brief.",
            "input": [
                {"type": "message", "role": "developer", "content": "No emoji."},
                {"type": "message", "role": "user", "content": "hi"},
            ],
        },
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "No emoji."},
                {"role": "user", "content": "hi"},
            ]
        },
    ),
    (
        "a tool call, its output, and the answer",
        {
            "input": [
                {"type": "message", "role": "user", "content": "weather in SF?"},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"SF"}'},
                {"type": "function_call_output", "call_id": "c1", "output": '{"weather":"cold"}'},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Cold."}]},
            ],
            "tools": [TOOL],
            "max_output_tokens": 64,
            "temperature": 0.7,
            "top_p": 0.9,
        },
        {
            "messages": [
                {"role": "user", "content": "weather in SF?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"SF"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": '{"weather":"cold"}'},
                {"role": "assistant", "content": "Cold."},
            ],
            "tools": [{"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}],
            "max_tokens": 64,
            "temperature": 0.7,
            "top_p": 0.9,
        },
    ),
    (
        "parallel calls share one assistant message",
        {
            "input": [
                {"type": "message", "role": "user", "content": "two cities"},
                {"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": '{"city":"A"}'},
                {"type": "function_call", "call_id": "b", "name": "get_weather", "arguments": '{"city":"B"}'},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "two cities"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"A"}'},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"B"}'},
                        },
                    ],
                },
            ]
        },
    ),
    (
        "reasoning becomes a think block",
        {
            "input": [
                {"type": "message", "role": "user", "content": "2+2?"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "add them"}]},
                {"type": "message", "role": "assistant", "content": "4"},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "<think>add them</think>4"},
            ]
        },
    ),
]


def strip_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item ids are made up on conversion; compare without them (and with text content normalised)."""
    out = []
    for item in items:
        item = {k: v for k, v in item.items() if k not in ("id", "status")}
        if item.get("type", "message") == "message":
            content = item.get("content")
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            item = {"type": "message", "role": item["role"], "content": text}
        if item.get("type") == "reasoning":
            item = {"type": "reasoning", "summary": [{"type": "summary_text", "text": item["summary"][0]["text"]}]}
        out.append(item)
    return out


@pytest.mark.parametrize(("name", "responses", "chat"), CASES, ids=[c[0] for c in CASES])
def test_request_to_chat(name: str, responses: dict[str, Any], chat: dict[str, Any]) -> None:
    assert responses_request_to_chat(responses) == chat


@pytest.mark.parametrize(("name", "responses", "chat"), CASES[1:], ids=[c[0] for c in CASES[1:]])
def test_request_round_trip(name: str, responses: dict[str, Any], chat: dict[str, Any]) -> None:
    back = chat_request_to_responses(chat)
    assert strip_ids(back["input"]) == strip_ids(responses["input"])
    assert {k: v for k, v in back.items() if k != "input"} == {k: v for k, v in responses.items() if k != "input"}


def test_string_input_is_a_user_message() -> None:
    assert responses_request_to_chat({"input": "hello"})["messages"] == [{"role": "user", "content": "hello"}]


def completion(content: str | None, finish: str = "stop", calls: list[dict[str, Any]] | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def test_completion_with_think_and_tool_call_to_responses() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"X"}'}}]
    response = chat_response_to_responses(completion("<think>look it up</think>", "tool_calls", calls))
    assert [item["type"] for item in response["output"]] == ["reasoning", "function_call"]
    assert response["output"][0]["summary"][0]["text"] == "look it up"
    assert response["output"][1]["name"] == "get_weather" and response["output"][1]["call_id"] == "c"
    assert response["usage"]["input_tokens"] == 10 and response["usage"]["output_tokens"] == 5
    back = responses_response_to_chat(response)
    assert back["choices"][0]["message"]["tool_calls"] == calls
    assert back["choices"][0]["finish_reason"] == "tool_calls"
    assert back["choices"][0]["message"]["content"] == "<think>look it up</think>"


def test_length_finish_is_an_incomplete_response_and_back() -> None:
    response = chat_response_to_responses(completion("It was a dark and", "length"))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert responses_response_to_chat(response)["choices"][0]["finish_reason"] == "length"


def test_split_think() -> None:
    assert split_think("<think>a\nb</think>\n\nanswer") == ("a\nb", "answer")
    assert split_think("no think") == (None, "no think")
    assert split_think("answer <think>late</think>") == (None, "answer <think>late</think>")


def test_token_ids_on_a_chat_assistant_message_ride_on_its_last_item() -> None:
    bundle = {"prompt_token_ids": [1, 2], "generation_token_ids": [3, 4], "generation_log_probs": [-0.5, -0.25]}
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    params = chat_request_to_responses(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "<think>hm</think>Let me look.", "tool_calls": [call], **bundle},
                {"role": "tool", "tool_call_id": "c1", "content": "cold"},
            ]
        }
    )
    kinds = [item["type"] for item in params["input"]]
    assert kinds == ["message", "reasoning", "message", "function_call", "function_call_output"]
    carriers = [item for item in params["input"] if "generation_token_ids" in item]
    assert carriers == [params["input"][3]] and {k: carriers[0][k] for k in bundle} == bundle
