"""Property tests of the wire formats and readers, on arbitrary input (hypothesis).

- Responses ⇄ Chat Completions: a conversation, a request and a response each come back as they went, in both
  directions (what the mapping's table in `gym_serve.wire.chat` says it keeps).
- The Hermes tool-call parser on arbitrary text: never an exception; every `<tool_call>` block is either a
  function call or left, word for word, in the message text where the model's mistake stays visible.
- The JSONL reader on arbitrary bytes: never an exception; every line is a row or an error naming the file and
  that line.
- The chat template's token extension (`gym_serve.wire.chat_template`) on arbitrary conversations, the policy
  sampling any ids: every call's prompt extends the previous call's prompt + generation (the tiny model's
  tokenizer and template).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gym_serve.errors import InputError
from gym_serve.wire.chat import (
    chat_request_to_responses,
    chat_response_to_responses,
    responses_request_to_chat,
    responses_response_to_chat,
)
from gym_serve.wire.chat_template import ChatTokenizer
from gym_serve.wire.hermes import parse_output
from gym_serve.wire.jsonl import scan_jsonl
from gym_serve.wire.tokens import check_contiguity, token_response

from .properties import BOUNDED, json_values

# ---- conversations --------------------------------------------------------------------------------------------

words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20)
"""Text with something in it: the mapping keeps text exactly, but (as Chat has no empty assistant turn) not ''."""
texts = words.filter(lambda t: t.strip() and t == t.strip() and "<think>" not in t and "</think>" not in t)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,20}", fullmatch=True)
arguments = json_values.map(lambda v: json.dumps({"value": v}))


@st.composite
def assistant_turn(draw: st.DrawFn, number: int) -> list[dict[str, Any]]:
    """What the model said in one turn: reasoning, text and tool calls, each optional but not all absent; the
    calls' outputs follow."""
    turn: list[dict[str, Any]] = []
    if draw(st.booleans()):
        turn.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": draw(texts)}]})
    calls = draw(st.lists(st.tuples(names, arguments), max_size=2))
    if draw(st.booleans()) or not calls:
        turn.append({"type": "message", "role": "assistant", "content": draw(texts)})
    ids = [f"call_{number}_{i}" for i in range(len(calls))]
    turn += [
        {"type": "function_call", "call_id": id_, "name": name, "arguments": args}
        for id_, (name, args) in zip(ids, calls, strict=True)
    ]
    turn += [{"type": "function_call_output", "call_id": id_, "output": draw(texts)} for id_ in ids]
    return turn


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append({"type": "message", "role": "system", "content": draw(texts)})
    for number in range(draw(st.integers(1, 4))):
        items.append({"type": "message", "role": "user", "content": draw(texts)})
        if draw(st.booleans()):
            items += draw(assistant_turn(number))
    return items


def said(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A conversation's content, without what each side may add (ids, statuses, text as parts or a string)."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            content = item["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            out.append(("message", item["role"], text))
        elif kind == "reasoning":
            out.append(("reasoning", "\n".join(p["text"] for p in item["summary"])))
        elif kind == "function_call":
            out.append(("function_call", item["call_id"], item["name"], item["arguments"]))
        else:
            out.append(("function_call_output", item["call_id"], item["output"]))
    return out


tools = st.lists(
    st.builds(
        lambda name, description: {
            "type": "function",
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"value": {}}},
        },
        names,
        texts,
    ),
    max_size=2,
)


@BOUNDED
@given(conversations(), tools, st.none() | st.integers(1, 4096), st.none() | st.floats(0, 2))
def test_a_responses_request_comes_back_from_chat_as_it_went(
    items: list[dict[str, Any]], offered: list[dict[str, Any]], max_tokens: int | None, temperature: float | None
) -> None:
    request: dict[str, Any] = {"input": items, "tools": offered, "max_output_tokens": max_tokens}
    if temperature is not None:
        request["temperature"] = temperature
    back = chat_request_to_responses(responses_request_to_chat(request))
    assert said(back["input"]) == said(items)
    assert back.get("tools", []) == offered
    assert back.get("max_output_tokens") == max_tokens and back.get("temperature") == temperature


@BOUNDED
@given(conversations())
def test_a_chat_request_comes_back_from_responses_as_it_went(items: list[dict[str, Any]]) -> None:
    chat = responses_request_to_chat({"input": items})
    again = responses_request_to_chat(chat_request_to_responses(chat))
    assert again["messages"] == chat["messages"]


@st.composite
def responses(draw: st.DrawFn) -> dict[str, Any]:
    """A model's answer: one turn's reasoning, text and calls, complete or cut at the length limit."""
    output = [item for item in draw(assistant_turn(0)) if item["type"] != "function_call_output"]
    incomplete = draw(st.booleans())
    counts = draw(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)))
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "m",
        "status": "incomplete" if incomplete else "completed",
        "output": output,
        "usage": {"input_tokens": counts[0], "output_tokens": counts[1], "total_tokens": sum(counts)},
    }
    if incomplete:
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    return response


@BOUNDED
@given(responses())
def test_a_response_comes_back_from_a_chat_completion_as_it_went(response: dict[str, Any]) -> None:
    back = chat_response_to_responses(responses_response_to_chat(response))
    assert said(back["output"]) == said(response["output"])
    assert back["status"] == response["status"] and back.get("incomplete_details") == response.get(
        "incomplete_details"
    )
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert back["usage"][key] == response["usage"][key]


# ---- Hermes tool calls ------------------------------------------------------------------------------------------

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
model_text = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from(["<tool_call>", "</tool_call>", "<think>", "</think>", "\n", "{", "}", '"name"', "[" * 50]),
        st.builds(
            lambda name, args: f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {args}}}</tool_call>',
            names,
            arguments,
        ),
        json_values.map(lambda v: f"<tool_call>{json.dumps(v)}</tool_call>"),
    ),
    max_size=8,
).map("".join)


@BOUNDED
@given(model_text)
def test_the_hermes_parser_never_raises_and_keeps_every_block_it_cannot_read(text: str) -> None:
    items = parse_output(text)
    calls = [item for item in items if item["type"] == "function_call"]
    shown = "".join(part["text"] for item in items if item["type"] == "message" for part in item["content"])
    for call in calls:
        assert isinstance(call["name"], str) and isinstance(call["arguments"], str)
    blocks = _BLOCK.findall(text.split("</think>", 1)[-1] if text.lstrip().startswith("<think>") else text)
    unread = [b for b in blocks if not _a_call(b)]
    for block in unread:
        assert block in shown, f"a malformed tool call vanished: {block!r}"
    assert len(calls) == len(blocks) - len(unread)


def test_a_tool_call_nested_past_the_json_parsers_recursion_stays_visible_text() -> None:
    """Found: `[` × 100,000 inside `<tool_call>` raised RecursionError out of the parser (a model may say it)."""
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    (item,) = parse_output(text)
    assert item["type"] == "message" and item["content"][0]["text"] == text


def _a_call(block: str) -> bool:
    try:
        call = json.loads(block)
        call["name"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return False
    return True


# ---- the JSONL reader -------------------------------------------------------------------------------------------

lines = st.lists(
    st.one_of(
        st.binary(max_size=40),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(st.text(max_size=5), json_values, max_size=3).map(lambda d: json.dumps(d).encode()),
        st.sampled_from([b"\xef\xbb\xbf{}", b"{}\r", b'{"a": NaN}', b'{"a": 1, "a": 2}', b"[" * 5000, b'"\x01"']),
    ),
    max_size=6,
)


@BOUNDED
@given(lines)
def test_the_jsonl_reader_never_raises_and_names_the_line_of_every_bad_one(
    tmp_path_factory: Any, rows: list[bytes]
) -> None:
    path: Path = tmp_path_factory.mktemp("jsonl") / "in.jsonl"
    path.write_bytes(b"\n".join(row.replace(b"\n", b" ") for row in rows))
    seen = []
    for number, row, error in scan_jsonl(path):
        seen.append(number)
        assert (row is None) != (error is None)
        if error is not None:
            assert isinstance(error, InputError) and error.line == number and error.source == str(path)
            assert str(error).startswith((f"{path}, line {number}: ", f"{path}, line {number}, field `"))
        else:
            assert isinstance(row, dict)
    assert seen == sorted(set(seen)) and all(1 <= n <= max(len(rows), 1) for n in seen)


# ---- the chat template's token extension --------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_tokenizer(tiny_model: Path) -> ChatTokenizer:
    from transformers import AutoTokenizer

    return ChatTokenizer(AutoTokenizer.from_pretrained(tiny_model))


@st.composite
def episodes(draw: st.DrawFn, vocab: int) -> list[tuple[list[int], list[str]]]:
    """Model calls of one rollout: the ids the policy samples (any ids, ending at its stop token), and what the
    environment answers each (a tool output per call the text makes, else the user's next message)."""
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        sampled = draw(st.lists(st.integers(0, vocab - 1), max_size=30))
        calls.append((sampled, draw(st.lists(texts, min_size=1, max_size=3))))
    return calls


@BOUNDED
@given(data=st.data())
def test_every_call_of_an_arbitrary_conversation_extends_the_ids_before_it(
    chat_tokenizer: ChatTokenizer, data: st.DataObject
) -> None:
    tokenizer: Any = chat_tokenizer.tokenizer
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    offered = data.draw(tools)
    items: list[dict[str, Any]] = data.draw(conversations().map(lambda c: [i for i in c if i["type"] == "message"]))
    output: list[dict[str, Any]] = []
    for sampled, answers in data.draw(episodes(len(tokenizer))):
        prompt = chat_tokenizer.prompt_ids({"input": items, "tools": offered})
        generated = [*sampled, stop]
        said_items = parse_output(tokenizer.decode(sampled, skip_special_tokens=True))  # what vLLM hands back
        response = token_response("tiny", said_items, prompt, generated, [-1.0] * len(generated), "stop")
        output += response["output"]
        items += response["output"]
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        if calls:
            items += [
                {"type": "function_call_output", "call_id": c["call_id"], "output": a}
                for c, a in zip(calls, answers * len(calls), strict=False)
            ]
        else:
            items.append({"type": "message", "role": "user", "content": answers[0]})
    report = check_contiguity({"output": output})
    assert report.ok, report.problems
