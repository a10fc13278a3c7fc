"""Writes the bad-input corpus beside it: one file per kind of bad input, each mixing bad lines with good ones.

    python tests/data/bad_inputs/make_corpus.py [FOLDER]      (default: this script's folder)

The good lines are `example_single_tool_call`'s example rows (the replay model knows their answers), so a good
line is a rollout with reward 1. What each file holds, and what must come of it through `gym-serve collect` and
through `POST /v1/rollouts`, is in `tests/test_bad_inputs.py`. The 20 MB row is not a file here: the test
writes it (a row with a 20 MB task field), so the repository stays small.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[2] / "envs" / "example_single_tool_call" / "data" / "example.jsonl"


def good(i: int, **changes: Any) -> dict[str, Any]:
    row = json.loads(EXAMPLES.read_text().splitlines()[i])
    row.update(changes)
    return row


def params(i: int, **changes: Any) -> dict[str, Any]:
    """Example row `i` with `responses_create_params` changed."""
    row = good(i)
    row["responses_create_params"] = {**row["responses_create_params"], **changes}
    return row


def text(row: Any) -> str:
    return json.dumps(row)


def nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def schema(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        value = {"type": "object", "properties": {"inner": value}}
    return value


def tool(**changes: Any) -> dict[str, Any]:
    return {**good(0)["responses_create_params"]["tools"][0], **changes}


def message(role: str, content: str = "hi") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


DEVELOPER = good(0)["responses_create_params"]["input"][0]

CORPUS: dict[str, list[str | bytes]] = {
    "malformed_json.jsonl": [
        text(good(0)),
        '{"responses_create_params": {"input": "what is it like in sf?"',
        "not json at all",
        text(good(1)),
        '{"responses_create_params": {"input": "hi"},}',
        "[1, 2, 3]",
    ],
    "wrong_types.jsonl": [
        text({"responses_create_params": {"input": 42}}),
        text(params(0, temperature="hot")),
        text(params(1, tools={"name": "get_weather"})),
        text(good(2, agent_ref={"name": 5})),
        text(good(3, _ng_task_index="3")),
        text({"responses_create_params": "what is it like in sf?"}),
        text(good(4)),
    ],
    "byte_order_mark.jsonl": [b"\xef\xbb\xbf" + text(good(0)).encode(), text(good(1)), text(good(2))],
    "crlf.jsonl": [text(good(0)) + "\r", text(good(1)) + "\r", "\r", text(good(2)) + "\r"],
    "nan_and_infinity.jsonl": [
        text(params(0, temperature=0.5)).replace("0.5", "NaN"),
        text(good(1, score=1.5)).replace("1.5", "Infinity"),
        text(good(2, score=1.5)).replace("1.5", "-Infinity"),
        text(good(3)),
    ],
    "duplicate_keys.jsonl": [
        text(good(0))[:-1] + ', "responses_create_params": {"input": "hello"}}',
        '{"responses_create_params": {"input": "what is it like in sf?", "input": "and in nyc?"}}',
        text(good(1)),
    ],
    "deep_nesting.jsonl": [
        text(good(0, notes=nested(150))),
        text(good(1, notes="@@")).replace('"@@"', "[" * 5000 + "]" * 5000),
        text(params(2, tools=[tool(parameters=schema(60))])),
        text(good(3)),
    ],
    "invalid_utf8.jsonl": [
        text(good(0, notes="@@")).encode().replace(b"@@", b"\xff\xfe"),
        text(good(1)),
        text(good(2, notes="@@")).encode().replace(b'"notes"', b'"n\xc3\x28tes"'),
    ],
    "control_characters.jsonl": [
        text(good(0, notes="@@")).replace("@@", "\x01"),
        text(good(1, notes="tab\there, nul\x00 and escape\x1b, escaped")),
        text(good(2, notes="@@")).replace("@@", "\x00"),
        text(good(3, notes="@@")).replace("@@", "a\tb"),
    ],
    "empty.jsonl": [],
    "blank_lines.jsonl": ["", "   ", "\t\r", ""],
    "all_bad.jsonl": [
        "{",
        "null",
        '"a string"',
        text({"responses_create_params": {}}),
        text({"responses_create_params": {"input": []}}),
        text({"responses_create_params": {"input": ""}}),
        text({"responses_create_params": {"input": "hi", "top_p": 0}}),
        text({"responses_create_params": {"input": "hi", "max_output_tokens": 0}}),
        text({"responses_create_params": {"input": "hi"}, "_ng_task_index": -1}),
        text({"responses_create_params": {"input": "hi"}, "agent_ref": {"name": ""}}),
        text({"input": "hi"}),
        '{"responses_create_params": {"input": "hi", "temperature": NaN}}',
    ],
    "wrong_roles.jsonl": [
        text(params(0, input=[DEVELOPER, message("robot")])),
        text(params(1, input=[DEVELOPER, {"role": "tool", "content": "sunny", "tool_call_id": "c1"}])),
        text(params(2, input=[DEVELOPER, {"type": "function_call_output", "call_id": "c9", "output": "sunny"}])),
        text(params(3, input=[DEVELOPER, {"content": "no role"}])),
        text(good(4)),
    ],
    "wrong_tool_schemas.jsonl": [
        text(params(0, tools=[tool(parameters={"type": "string"})])),
        text(params(1, tools=[tool(parameters={"type": "object", "properties": {"city": {"type": "strng"}}})])),
        text(params(2, tools=[tool(name="get weather!")])),
        text(params(3, tools=[{"type": "function", "parameters": {"type": "object"}}])),
        text(params(4, tools=[tool(type="web_search")])),
        text(good(5)),
    ],
}


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    for name, lines in CORPUS.items():
        data = b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines)
        (folder / name).write_bytes(data)
    print(f"wrote {len(CORPUS)} files to {folder}")


if __name__ == "__main__":
    main()
