"""Tool-call verifier: names, normalised arguments, schema-typed coercion, defaults, parallel calls as multisets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gym_serve.verifiers.tool_calls import compare_calls, normalize_arguments

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "default": 1},
            },
            "required": ["city"],
        },
    },
    {
        "type": "function",
        "name": "book",
        "parameters": {
            "type": "object",
            "properties": {
                "guests": {"type": "integer"},
                "price": {"type": "number"},
                "vip": {"type": "boolean"},
                "zip": {"type": "string"},
                "room": {"type": "object", "properties": {"floor": {"type": "integer"}}},
                "dates": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A Responses `function_call` item: arguments as JSON text, as models send them."""
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments), "call_id": "c"}


def expect(name: str, **arguments: Any) -> dict[str, Any]:
    """An xlam_fc `expected_answers` entry: arguments as an object."""
    return {"name": name, "arguments": arguments}


def reward(predicted: list[dict[str, Any]], expected: list[dict[str, Any]], **options: Any) -> float:
    return compare_calls(predicted, expected, **options).reward


def test_same_call_matches_whatever_the_key_order_or_number_form() -> None:
    predicted = [{"name": "book", "arguments": '{"price": 10.0, "guests": 2}'}]
    assert reward(predicted, [expect("book", guests=2, price=10)]) == 1.0
    assert reward([call("book", guests=2.0)], [expect("book", guests=2)]) == 1.0, "1 and 1.0 are equal"
    assert reward([call("book", vip=1)], [expect("book", vip=True)]) == 0.0, "booleans are not numbers"


def test_strings_and_numbers_differ_unless_the_schema_or_lenient_says_so() -> None:
    assert reward([call("x", n="3")], [expect("x", n=3)]) == 0.0
    assert reward([call("x", n="3")], [expect("x", n=3)], lenient=True) == 1.0
    assert reward([call("x", n="true")], [expect("x", n=True)], lenient=True) == 1.0
    assert reward([call("x", n="3 apples")], [expect("x", n=3)], lenient=True) == 0.0
    # Under the tool's declared types, a value that spells the type is that value, on either side.
    assert reward([call("book", guests="2")], [expect("book", guests=2)], tools=TOOLS) == 1.0
    assert reward([call("book", guests=2)], [expect("book", guests="2")], tools=TOOLS) == 1.0
    assert reward([call("book", price="9.5")], [expect("book", price=9.5)], tools=TOOLS) == 1.0
    assert reward([call("book", vip="false")], [expect("book", vip=False)], tools=TOOLS) == 1.0
    assert reward([call("book", zip=10001)], [expect("book", zip="10001")], tools=TOOLS) == 1.0
    assert reward([call("book", guests="2.5")], [expect("book", guests=2)], tools=TOOLS) == 0.0
    assert reward([call("book", room={"floor": "3"})], [expect("book", room={"floor": 3})], tools=TOOLS) == 1.0
    assert reward([call("book", room='{"floor": 3}')], [expect("book", room={"floor": 3})], tools=TOOLS) == 1.0
    assert reward([call("book", room='{"floor": 3}')], [expect("book", room={"floor": 3})]) == 0.0, "no schema"


def test_omitted_defaults_equal_explicit_defaults() -> None:
    assert (
        reward([call("get_weather", city="Paris")], [expect("get_weather", city="Paris", unit="celsius")], tools=TOOLS)
        == 1.0
    )
    assert (
        reward(
            [call("get_weather", city="Paris", unit="celsius", days=1)],
            [expect("get_weather", city="Paris")],
            tools=TOOLS,
        )
        == 1.0
    )
    result = compare_calls(
        [call("get_weather", city="Paris")], [expect("get_weather", city="Paris", unit="fahrenheit")], tools=TOOLS
    )
    assert result.reward == 0.0
    assert result.checks[0].problems == ('`unit`: expected "fahrenheit", got "celsius"',)
    # Without the schema there is no default to fill in.
    assert reward([call("get_weather", city="Paris")], [expect("get_weather", city="Paris", unit="celsius")]) == 0.0


def test_parallel_calls_match_as_multisets() -> None:
    expected = [
        expect("get_weather", city="Paris"),
        expect("get_weather", city="Rome"),
        expect("get_weather", city="Paris"),
    ]
    shuffled = [call("get_weather", city="Paris"), call("get_weather", city="Paris"), call("get_weather", city="Rome")]
    result = compare_calls(shuffled, expected, tools=TOOLS)
    assert result.reward == 1.0 and result.num_correct == 3
    assert sorted((c.expected_index, c.predicted_index) for c in result.checks) == [(0, 0), (1, 2), (2, 1)]
    once = compare_calls(shuffled[:2], expected, tools=TOOLS)
    assert once.reward == 0.0 and [c.status for c in once.checks] == ["matched", "missing", "matched"]


def test_details_say_which_call_was_wrong_missing_or_extra() -> None:
    expected = [expect("get_weather", city="Paris"), expect("book", guests=2, dates=["2024-05-01", "2024-05-02"])]
    predicted = [
        call("book", guests=2, dates=["2024-05-02", "2024-05-01"], pets=True),
        call("get_weather", city="Paris"),
        call("send_email", to="x"),
    ]
    result = compare_calls(predicted, expected, tools=TOOLS)
    assert result.reward == 0.0 and (result.num_expected, result.num_predicted, result.num_correct) == (2, 3, 1)
    by_status = {c.status: c for c in result.checks}
    assert set(by_status) == {"matched", "wrong_arguments", "extra"}
    wrong = by_status["wrong_arguments"]
    assert (wrong.name, wrong.expected_index, wrong.predicted_index) == ("book", 1, 0)
    assert wrong.problems == (
        '`dates[0]`: expected "2024-05-01", got "2024-05-02"',
        '`dates[1]`: expected "2024-05-02", got "2024-05-01"',
        "`pets`: not expected (got true)",
    )
    assert (by_status["extra"].name, by_status["extra"].predicted_index) == ("send_email", 2)
    assert result.details()[0]["status"] == "matched" and isinstance(result.details()[1]["problems"], list)


def test_a_wrong_call_is_paired_with_the_closest_candidate() -> None:
    expected = [expect("book", guests=2, price=10, vip=True)]
    predicted = [call("book", guests=3, price=11, vip=False), call("book", guests=2, price=10, vip=False)]
    result = compare_calls(predicted, expected)
    wrong = next(c for c in result.checks if c.status == "wrong_arguments")
    assert wrong.predicted_index == 1 and wrong.problems == ("`vip`: expected true, got false",)
    assert [c.status for c in result.checks] == ["wrong_arguments", "extra"]


def test_no_expected_calls_rewards_only_abstaining() -> None:
    assert reward([], []) == 1.0
    result = compare_calls([call("get_weather", city="Paris")], [])
    assert result.reward == 0.0 and result.checks[0].status == "extra"


def test_unreadable_predicted_arguments_are_wrong_not_a_crash() -> None:
    bad = {"type": "function_call", "name": "book", "arguments": '{"guests": 2'}
    result = compare_calls([bad], [expect("book", guests=2)])
    assert result.reward == 0.0 and result.checks[0].status == "wrong_arguments"
    assert "not valid JSON" in result.checks[0].problems[0]
    listed = compare_calls([{"name": "book", "arguments": "[1]"}], [expect("book")])
    assert "must be a JSON object, got list" in listed.checks[0].problems[0]
    huge = compare_calls([{"name": "book", "arguments": '{"a": "' + "x" * 200_000 + '"}'}], [expect("book")])
    assert "at most 100000 are read" in huge.checks[0].problems[0]
    deep = compare_calls([{"name": "book", "arguments": '{"a": ' + "[" * 100 + "]" * 100 + "}"}], [expect("book")])
    assert "nested more than 64" in deep.checks[0].problems[0]
    assert compare_calls([{"arguments": "{}"}, "nonsense"], []).num_predicted == 2  # type: ignore[list-item]


def test_chat_completions_calls_and_tools_are_read_too() -> None:
    chat_tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}} for t in TOOLS]
    predicted = [{"id": "1", "type": "function", "function": {"name": "book", "arguments": '{"guests": "4"}'}}]
    assert reward(predicted, [expect("book", guests=4)], tools=chat_tools) == 1.0


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ([{"arguments": {}}], "expected call 0 has no `name`"),
        ([expect("a"), {"name": "b", "arguments": "{not json"}], r"expected call 1 \(`b`\): arguments are not valid"),
        ([{"name": "c", "arguments": [1]}], r"expected call 0 \(`c`\): arguments must be a JSON object"),
    ],
)
def test_a_malformed_expected_call_is_the_tasks_error(expected: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compare_calls([], expected)


def test_normalize_arguments_shows_what_is_compared() -> None:
    schema = TOOLS[0]["parameters"]
    assert normalize_arguments('{"city": "Oslo", "days": "3"}', schema) == {
        "city": "Oslo",
        "days": 3,
        "unit": "celsius",
    }
    assert normalize_arguments("", schema) == {"unit": "celsius", "days": 1}
