"""JSON-schema verifier on hand-made answers: where the JSON is, why it fails, and schemas that are the task's bug."""

from __future__ import annotations

import re
import time

import pytest

from gym_serve.verifiers.json_schema import (
    InvalidSchemaError,
    JsonParseError,
    admits_content,
    extract_json,
    load_schema,
    strictify,
    verify_json,
)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city"],
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]\n", [1, 2]),
        ('Here you go:\n```json\n{"a": 1}\n```\nDone.', {"a": 1}),
        ('```\n{"a": 2}\n```', {"a": 2}),
        ('Draft:\n```json\n{"a": 1}\n```\nFixed:\n```JSON\n{"a": 3}\n```\nThat\'s final.', {"a": 3}),
        ('Sure! {"a": {"b": [1, 2]}} Hope this helps {at all}.', {"a": {"b": [1, 2]}}),
        ('Strings may hold braces: {"s": "}{ ]["} end', {"s": "}{ ]["}),
        ('first {"a": 1} then the answer {"a": 2}', {"a": 2}),
        ('"just a string"', "just a string"),
    ],
)
def test_extract_json(text: str, value: object) -> None:
    assert extract_json(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no json here at all", "holds no JSON object or array"),
        ('```json\n{"a": 1,}\n```', "the last ```json block is not valid JSON"),
        ('```json\n{"a": 1}\n```\nthen\n```json\n{oops}\n```', "the last ```json block"),
        ("Answer: {\"name\": 'x'}", "no {...} or [...] in the answer is valid JSON (tried 1); the last: Expecting "),
        ("Answer: {name: 'x'} (not JSON at all)", "holds no JSON object or array"),
        ('{"a": 1,}', "(tried 1); the last: "),
        ("NaN", "holds no JSON"),
    ],
)
def test_extract_json_failures_say_what_was_tried(text: str, message: str) -> None:
    with pytest.raises(JsonParseError, match=re.escape(message)):
        extract_json(text)


def test_a_valid_answer_scores_one_and_keeps_the_value() -> None:
    result = verify_json('{"name": "Ada", "age": 36, "tags": ["math"]}', PERSON)
    assert (result.reward, result.error_type, result.error) == (1.0, None, None)
    assert result.value == {"name": "Ada", "age": 36, "tags": ["math"]} and result.parsed


def test_json_in_a_fence_or_in_prose_is_a_parse_error_unless_parsing_is_lenient() -> None:
    """NeMo Gym's scoring: the whole answer must be the JSON. Accepted before this rule; rejected now."""
    for wrapped in ('```json\n{"name": "Ada", "age": 36}\n```', 'Here it is: {"name": "Ada", "age": 36}'):
        strict = verify_json(wrapped, PERSON)
        assert (strict.reward, strict.error_type) == (0.0, "parse_error")
        assert "not JSON as a whole" in (strict.error or "")
        assert verify_json(wrapped, PERSON, lenient_parse=True).reward == 1.0


@pytest.mark.parametrize(
    ("answer", "path", "message"),
    [
        ('{"name": "Ada", "age": "36"}', "$.age", "'36' is not of type 'integer'"),
        ('{"name": "Ada"}', "$", "'age' is a required property"),
        ('{"name": "Ada", "age": 36, "email": "a@b.c"}', "$", "Additional properties are not allowed ('email'"),
        ('{"name": "Ada", "age": 36, "address": {"zip": "1234"}}', "$.address", "'city' is a required property"),
        ('{"name": "Ada", "age": 36, "address": {"city": "X", "zip": "1234"}}', "$.address.zip", "does not match"),
        ('{"name": "Ada", "age": 36, "tags": ["a", 2]}', "$.tags[1]", "2 is not of type 'string'"),
        ('{"name": "Ada", "age": -1}', "$.age", "-1 is less than the minimum of 0"),
        ("[1, 2]", "$", "is not of type 'object'"),
    ],
)
def test_validation_errors_name_the_first_problem_and_its_path(answer: str, path: str, message: str) -> None:
    result = verify_json(answer, PERSON)
    assert result.reward == 0.0 and result.error_type == "validation_error" and result.parsed
    assert result.error_path == path
    assert message in result.error and result.error.split(" at ")[-1].startswith(path)


def test_parse_errors_are_not_validation_errors() -> None:
    result = verify_json('{"name": "Ada", "age": 36', PERSON)
    assert (result.reward, result.error_type, result.value, result.parsed) == (0.0, "parse_error", None, False)
    assert verify_json("   ", PERSON).error_type == "empty_response"


def test_the_schema_may_be_json_text_as_in_nemo_gym_rows() -> None:
    import json

    assert verify_json('{"name": "Ada", "age": 1}', json.dumps(PERSON)).reward == 1.0
    assert verify_json('{"name": "Ada", "age": 1.5}', json.dumps(PERSON)).error_path == "$.age"


def test_formats_are_annotations_as_in_nemo_gym_and_checked_on_request() -> None:
    """NeMo Gym 0.7.0's validator checks no `format`, and its own rows use them: so by default neither do we."""
    schema = {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email"}, "day": {"type": "string", "format": "date"}},
    }
    for answer in (
        '{"email": "a@example.com", "day": "2024-02-29"}',
        '{"email": "not an email"}',
        '{"day": "2023-02-30"}',
    ):
        assert verify_json(answer, schema).reward == 1.0, answer
    assert verify_json('{"email": "a@example.com", "day": "2024-02-29"}', schema, check_formats=True).reward == 1.0
    assert verify_json('{"email": "not an email"}', schema, check_formats=True).error_path == "$.email"
    assert verify_json('{"day": "2023-02-30"}', schema, check_formats=True).error_path == "$.day"


@pytest.mark.parametrize(
    ("answer", "schema"),
    [
        ("[]", {"type": "array", "items": {"type": "string"}}),
        ('{"name": "", "tags": []}', {"type": "object", "properties": {"name": {"type": "string"}, "tags": {}}}),
        ('{"name": null, "nested": {"a": "  "}}', {"type": "object"}),
        ("{}", {"type": "object", "properties": {"name": {"type": "string"}}}),
    ],
)
def test_a_content_free_answer_scores_zero_where_the_schema_has_room_for_content(answer: str, schema: dict) -> None:
    result = verify_json(answer, schema)
    assert (result.reward, result.error_type) == (0.0, "content_free")
    assert verify_json(answer, schema, pay_content_free=True).reward == 1.0  # NeMo Gym's: validity only


def test_a_content_free_answer_is_right_where_the_schema_admits_nothing_else() -> None:
    for answer, schema in [
        ("null", {"type": "null"}),
        ("[]", {"type": "array", "maxItems": 0}),
        ('""', {"const": ""}),
        ("[]", {"enum": [None, []]}),
    ]:
        assert not admits_content(schema), schema
        assert verify_json(answer, schema).reward == 1.0, schema
    for schema in ({"type": "integer"}, {"enum": [None, "x"]}, {"anyOf": [{"type": "null"}, {"type": "string"}]}, {}):
        assert admits_content(schema), schema
    assert verify_json('{"count": 0, "open": false}', {"type": "object"}).reward == 1.0  # 0 and false are content


def test_strict_mode_requires_every_property_and_forbids_others_like_nemo_gym() -> None:
    loose = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "object", "properties": {"c": {"type": "string"}}}},
    }
    assert verify_json('{"a": 1}', loose).reward == 1.0
    strict = verify_json('{"a": 1}', loose, strict=True)
    assert strict.reward == 0.0 and "'b' is a required property" in strict.error
    nested = verify_json('{"a": 1, "b": {"c": "x", "d": 1}}', loose, strict=True)
    assert nested.error_path == "$.b" and "Additional properties" in nested.error
    assert strictify(loose)["properties"]["b"]["required"] == ["c"] and "required" not in loose, "strictify copies"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "strnig"}, r"invalid JSON schema at \$\.type"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}},
            r"invalid JSON schema at \$\.properties\.a\.pattern",
        ),
        ({"type": "object", "required": "a"}, r"at \$\.required"),
        ('{"type": "object",', "the schema is not valid JSON"),
        ("[1, 2]", "a JSON schema is an object or a boolean, got list"),
        ({"$ref": "https://example.com/schema.json"}, "cannot be resolved"),
    ],
)
def test_a_bad_schema_is_the_tasks_error_not_a_zero(schema: object, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message):
        verify_json('{"a": 1}', schema)  # type: ignore[arg-type]


def test_schemas_are_compiled_once() -> None:
    assert load_schema(PERSON) is load_schema(dict(reversed(list(PERSON.items()))))
    assert load_schema(PERSON) is not load_schema(PERSON, strict=True)


def test_huge_or_hostile_answers_are_refused_quickly() -> None:
    started = time.monotonic()
    big = verify_json('{"a": "' + "x" * 300_000 + '"}', {"type": "object"})
    assert big.error_type == "too_large" and "300009 characters" in big.error
    assert verify_json('{"a": "xxxx"}', {"type": "object"}, max_chars=5).error_type == "too_large"
    deep = verify_json("[" * 100 + "]" * 100, {"type": "array"})
    assert deep.error_type == "parse_error" and "nested more than 64" in deep.error
    too_deep_to_parse = verify_json("[" * 50_000 + "]" * 50_000, {"type": "array"}, max_chars=10**6)
    assert too_deep_to_parse.error_type == "parse_error"
    braces = verify_json(
        "{" * 199_000, {"type": "object"}, lenient_parse=True
    )  # unbalanced: one linear scan, no span to parse
    assert braces.error_type == "parse_error"
    prose = verify_json(
        "{x} " * 49_000, {"type": "object"}, lenient_parse=True
    )  # 49,000 spans that cannot be JSON: none parsed
    assert prose.error_type == "parse_error" and "holds no JSON object or array" in prose.error
    near_misses = verify_json(
        '{"a" 1} ' * 20_000, {"type": "object"}, lenient_parse=True
    )  # could be JSON: only the last 100 tried
    assert near_misses.error_type == "parse_error" and "tried 100" in near_misses.error
    assert time.monotonic() - started < 5
