"""The contiguity checker and the Hermes tool-call parser, on hand-made cases."""

from __future__ import annotations

import json

from gym_serve.wire.hermes import parse_output, render_tool_call
from gym_serve.wire.tokens import check_contiguity


def call(prompt: list[int], generation: list[int], logprobs: list[float] | None = None) -> dict:
    return {
        "type": "message",
        "prompt_token_ids": prompt,
        "generation_token_ids": generation,
        "generation_log_probs": logprobs if logprobs is not None else [-0.1] * len(generation),
    }


def test_contiguous_calls_pass() -> None:
    tool_output = {"type": "function_call_output", "output": "x"}
    report = check_contiguity(
        {"response": {"output": [call([1, 2], [3, 4]), tool_output, call([1, 2, 3, 4, 5], [6])]}}
    )
    assert report.ok and report.calls == 2 and report.problems == []


def test_retokenized_history_is_caught() -> None:
    report = check_contiguity({"output": [call([1, 2], [3, 4]), call([1, 2, 9, 4, 5], [6])]})
    assert not report.ok
    assert "call 2: prompt does not extend" in report.problems[0] and "token 2" in report.problems[0]


def test_bundle_defects_are_caught() -> None:
    report = check_contiguity({"output": [call([1], [2, 3], [-0.5])]})
    assert not report.ok and "2 generated tokens but 1 log-probs" in report.problems[0]
    assert not check_contiguity({"output": [{"type": "message"}]}).ok, "no token ids at all is not ok"


def test_parse_think_tool_calls_and_text() -> None:
    text = (
        '<think>need weather</think>Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "SF"}}\n</tool_call>\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    items = parse_output(text)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call"]
    assert items[0]["summary"][0]["text"] == "need weather"
    assert items[1]["content"][0]["text"] == "Let me check."
    assert items[2]["name"] == "get_weather" and json.loads(items[2]["arguments"]) == {"city": "SF"}
    assert items[2]["call_id"] != items[3]["call_id"]


def test_malformed_tool_call_stays_visible() -> None:
    items = parse_output("<tool_call>{not json}</tool_call>")
    assert [i["type"] for i in items] == ["message"]
    assert "<tool_call>{not json}</tool_call>" in items[0]["content"][0]["text"]


def test_render_round_trips_through_parse() -> None:
    items = parse_output(render_tool_call("get_weather", '{"city": "Paris"}'))
    assert items[0]["name"] == "get_weather" and json.loads(items[0]["arguments"]) == {"city": "Paris"}
