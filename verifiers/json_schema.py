"""JSON answers checked against a JSON schema: find the JSON in the model's text, parse it, validate it.

Where the answer is, in order:

1. the whole text, when it is JSON (NeMo Gym's `structured_outputs` asks for bare JSON);
2. the last ```json (or unlabelled ```) fenced block, and only that one: a model that
   corrects itself in a later block is judged on the correction;
3. the last balanced `{...}` / `[...]` span of the text that parses (an answer wrapped in prose;
   spans that cannot open JSON, like `{x}`, are skipped, and at most the last 100 are tried).

Validation is `jsonschema`'s, with the draft the schema names in `$schema` (2020-12
otherwise). JSON Schema's `format` (`email`, `date`...) is an annotation, as in NeMo Gym
0.7.0 (its `openapi-schema-validator` checks no format); `check_formats=True` checks it
(formats whose checker needs a package that is not installed, e.g. `date-time` without
`rfc3339-validator`, pass unchecked). A `$ref` to another document is never fetched.

A content-free answer (every value null, a blank string or an empty array or object: `[]`
for an array schema without `minItems`, `""` for every string) is valid wherever the schema
sets no minimum, so a policy could learn to answer every row with one. It scores 0
(`error_type: content_free`) unless the schema admits nothing else (`admits_content`: no
place in it can hold a number, a boolean or a non-blank string), where it is the only right
answer; `pay_content_free=True` pays it as NeMo Gym does (validity only).

The reward is 1.0 only when the answer parses and validates; otherwise `error_type` says
which step failed (NeMo Gym's names: `empty_response`, `parse_error`, `validation_error`,
plus `too_large` and `content_free`) and `error` says what, with the JSON path of the most
relevant validation error (`best_match`).

An invalid *schema* is the task's bug, not the model's: it raises `InvalidSchemaError`
instead of scoring 0, so a broken dataset row fails loudly.

A model must not be able to stall a replica: answers over `max_chars` are refused before
parsing, the brace scan is one linear pass (prose full of braces costs O(n), not O(n²)),
and values nested deeper than `max_depth` are refused before validation. Two of jsonschema's
checks are replaced where the answer alone could stall or break them: `uniqueItems` compares
each pair of items when they are objects (minutes for 10,000 of them in a 130 kB answer:
a `verifier_timeout` the answer would buy), here one pass over canonical forms; and
`multipleOf` with a fractional step raises on an integer too large for a float, on `1e400`
(infinity) and on NaN (a failed verify, masked), here decided exactly. A schema `pattern` that backtracks
catastrophically is the task author's to avoid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

from .non_answer import is_content_free

__all__ = [
    "MAX_CHARS",
    "MAX_DEPTH",
    "InvalidSchemaError",
    "JsonParseError",
    "JsonSchemaResult",
    "admits_content",
    "extract_json",
    "load_schema",
    "strictify",
    "verify_json",
    "verify_value",
]

MAX_CHARS = 200_000
"""Longest answer parsed (characters); a structured answer this long is already far past any real task."""
MAX_DEPTH = 64
"""Deepest nesting of arrays/objects validated; deeper values would only exercise recursion limits."""
_MESSAGE_CHARS = 300

_MAX_SPANS = 100  # bare spans tried, from the last: each failed parse costs an exception
_JSON_START = re.compile(r'\{\s*["}]|\[\s*["\-0-9tfn\[\]{]')  # what can open a JSON object or array
_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)```", re.S | re.I)


class InvalidSchemaError(ValueError):
    """Raised when a task's schema is not JSON or not a valid JSON schema (the task is wrong, not the model)."""


class JsonParseError(ValueError):
    """Raised by `extract_json` when the text holds no JSON it can parse; the message says what was tried."""


@dataclass(frozen=True)
class JsonSchemaResult:
    """The verdict on one answer.

    `value` is the parsed answer (None when it did not parse, or when it parsed to
    `null`: `error_type` tells them apart). `error_path` is the JSON path of the
    validation error in the answer, e.g. `$.items[2].price`.
    """

    reward: float
    value: Any = None
    error_type: str | None = None
    error: str | None = None
    error_path: str | None = None

    @property
    def parsed(self) -> bool:
        return self.error_type in (None, "validation_error")


def verify_json(
    text: str,
    schema: Mapping[str, Any] | bool | str,
    *,
    strict: bool = False,
    lenient_parse: bool = False,
    check_formats: bool = False,
    pay_content_free: bool = False,
    max_chars: int = MAX_CHARS,
    max_depth: int = MAX_DEPTH,
) -> JsonSchemaResult:
    """Score `text` against `schema` (a dict, or its JSON text as in NeMo Gym's `schema_str`).

    `strict` first applies `strictify` (NeMo Gym's scoring: every declared property
    required, no others allowed). `lenient_parse` also looks for the JSON in a fence or in
    prose (see the module docstring). Raises `InvalidSchemaError` for a bad schema.
    """
    validator = load_schema(schema, strict=strict, check_formats=check_formats)
    if not text.strip():
        return JsonSchemaResult(0.0, error_type="empty_response", error="the answer has no text")
    if len(text) > max_chars:
        return JsonSchemaResult(
            0.0, error_type="too_large", error=f"the answer is {len(text)} characters; at most {max_chars} are parsed"
        )
    try:
        value = extract_json(text) if lenient_parse else _whole(text)
    except JsonParseError as e:
        return JsonSchemaResult(0.0, error_type="parse_error", error=str(e))
    return _validate(value, validator, pay_content_free=pay_content_free, max_depth=max_depth)


def verify_value(
    value: Any,
    schema: Mapping[str, Any] | bool | str,
    *,
    strict: bool = False,
    check_formats: bool = False,
    pay_content_free: bool = False,
    max_depth: int = MAX_DEPTH,
) -> JsonSchemaResult:
    """Score an already-parsed answer (a tool call's arguments) against `schema`, as `verify_json` scores text."""
    validator = load_schema(schema, strict=strict, check_formats=check_formats)
    return _validate(value, validator, pay_content_free=pay_content_free, max_depth=max_depth)


def admits_content(schema: Any) -> bool:
    """Whether some place in `schema` can hold content (a number, a boolean, a non-blank string); True when unsure.

    Read from its keywords, not proven: `$ref`, `not` and conditionals count as "can".
    """
    if not isinstance(schema, dict):
        return schema is not False
    if "const" in schema:
        return not is_content_free(schema["const"])
    if "enum" in schema:
        return not all(is_content_free(v) for v in schema["enum"])
    if "$ref" in schema or "not" in schema or "if" in schema:
        return True
    branches = [b for key in ("anyOf", "oneOf") for b in schema.get(key, [])]
    if branches and not any(admits_content(b) for b in branches):
        return False
    if any(not admits_content(b) for b in schema.get("allOf", [])):
        return False
    types = schema.get("type")
    if types is None:
        return True  # untyped: anything its branches (if any, and one of them has room) allow
    types = {types} if isinstance(types, str) else set(types)
    if types & {"number", "integer", "boolean"} or ("string" in types and schema.get("maxLength") != 0):
        return True
    if "array" in types and schema.get("maxItems") != 0:
        items = [schema.get("items", True), *schema.get("prefixItems", [])]
        if any(admits_content(i) for i in items):
            return True
    if "object" in types:
        values = [*schema.get("properties", {}).values(), *schema.get("patternProperties", {}).values()]
        values.append(schema.get("additionalProperties", True))
        return any(admits_content(v) for v in values)
    return False


def _validate(value: Any, validator: Validator, *, pay_content_free: bool, max_depth: int) -> JsonSchemaResult:
    depth = _depth(value, max_depth)
    if depth > max_depth:
        return JsonSchemaResult(
            0.0, error_type="parse_error", error=f"the JSON is nested more than {max_depth} levels deep"
        )
    try:
        errors = list(validator.iter_errors(value))
    except Unresolvable as e:
        raise InvalidSchemaError(f"the schema has a `$ref` that cannot be resolved here: {e}") from e
    if not errors:
        if is_content_free(value) and not pay_content_free and admits_content(validator.schema):
            return JsonSchemaResult(
                0.0,
                value=value,
                error_type="content_free",
                error="the answer holds no content (every value null, blank or empty); the schema has room for some",
            )
        return JsonSchemaResult(1.0, value=value)
    first = best_match(errors)
    assert first is not None  # errors is not empty
    more = f" ({len(errors) - 1} more)" if len(errors) > 1 else ""
    message = _clip(first.message)
    return JsonSchemaResult(
        0.0,
        value=value,
        error_type="validation_error",
        error=f"{message} at {first.json_path}{more}",
        error_path=first.json_path,
    )


def _whole(text: str) -> Any:
    try:
        return _loads(text.strip())
    except ValueError as e:
        raise JsonParseError(
            f"the answer is not JSON as a whole ({_describe(e)}); a fence or prose around it is not allowed"
        ) from None


def extract_json(text: str) -> Any:
    """The JSON answer in `text` (see the module docstring for where it is looked for)."""
    stripped = text.strip()
    try:
        return _loads(stripped)
    except ValueError as whole_error:
        fences = _FENCE.findall(text)
        if fences:
            try:
                return _loads(fences[-1].strip())
            except ValueError as e:
                raise JsonParseError(f"the last ```json block is not valid JSON: {_describe(e)}") from e
        spans = [(a, b) for a, b in _balanced_spans(text) if _JSON_START.match(text, a)][-_MAX_SPANS:]
        last_error: ValueError | None = None
        for start, end in reversed(spans):
            try:
                return _loads(text[start:end])
            except ValueError as e:
                last_error = last_error or e
        if last_error is not None:
            raise JsonParseError(
                f"no {{...}} or [...] in the answer is valid JSON (tried {len(spans)}); "
                f"the last: {_describe(last_error)}"
            ) from None
        raise JsonParseError(f"the answer holds no JSON object or array ({_describe(whole_error)})") from None


def load_schema(
    schema: Mapping[str, Any] | bool | str, *, strict: bool = False, check_formats: bool = False
) -> Validator:
    """A checked, cached validator for `schema`; raises `InvalidSchemaError` naming the problem and where."""
    if isinstance(schema, str):
        key = schema
    else:
        try:
            key = json.dumps(schema, sort_keys=True)
        except (TypeError, ValueError) as e:
            raise InvalidSchemaError(f"the schema is not JSON-serializable: {e}") from e
    return _compile(key, strict, check_formats)


def strictify(schema: Any) -> Any:
    """A copy of `schema` where every object with `properties` requires all of them and allows no others.

    NeMo Gym's `structured_outputs` scores this way (its `strictify_schema`), so rows
    from its datasets score the same here with `strict=True`.
    """
    if isinstance(schema, list):
        return [strictify(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strictify(value) for key, value in schema.items()}
    if isinstance(schema.get("properties"), dict):
        out["required"] = list(schema["properties"])
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=256)
def _compile(schema_json: str, strict: bool, check_formats: bool) -> Validator:
    try:
        schema = json.loads(schema_json)
    except ValueError as e:
        raise InvalidSchemaError(f"the schema is not valid JSON: {_describe(e)}") from e
    if not isinstance(schema, dict | bool):
        raise InvalidSchemaError(f"a JSON schema is an object or a boolean, got {type(schema).__name__}")
    if strict:
        schema = strictify(schema)
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise InvalidSchemaError(f"invalid JSON schema at {e.json_path}: {_clip(e.message)}") from e
    cls = _hardened(cls)
    return cls(schema, format_checker=cls.FORMAT_CHECKER if check_formats else None)


@lru_cache(maxsize=16)
def _hardened(cls: type[Validator]) -> type[Validator]:
    """`cls` with the `uniqueItems` and `multipleOf` an answer cannot stall or break (see the module docstring)."""
    multiple_of = cls.VALIDATORS.get("multipleOf")

    def unique_items(validator: Validator, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        if unique and validator.is_type(instance, "array"):
            seen: set[Any] = set()
            for item in instance:
                key = _canonical(item)
                if key in seen:
                    yield ValidationError(f"{instance!r} has non-unique elements")
                    return
                seen.add(key)

    def exact_multiple_of(validator: Validator, step: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        try:
            yield from multiple_of(validator, step, instance, schema)
        except (OverflowError, ValueError):  # an integer no float holds (decided exactly), infinity or NaN
            try:
                exact = (Fraction(instance) / Fraction(step)).denominator == 1
            except (OverflowError, ValueError):  # infinity (`1e400` parses to it) or NaN: a multiple of nothing
                exact = False
            if not exact:
                yield ValidationError(f"{instance!r} is not a multiple of {step}")

    replaced = {"uniqueItems": unique_items} | ({"multipleOf": exact_multiple_of} if multiple_of else {})
    return jsonschema.validators.extend(cls, validators=replaced)


def _canonical(value: Any) -> Any:
    """A hashable form equal exactly where jsonschema's `equal` says the values are: numbers by value (`1` is
    `1.0`), booleans apart from numbers, object keys in any order. Depth is bounded before validation."""
    if isinstance(value, dict):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_canonical(item) for item in value))
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    return (type(value).__name__, value)


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError as e:  # deeper than the C parser's stack allows
        raise ValueError("the JSON is nested too deeply to parse") from e


def _reject_constant(name: str) -> Any:
    raise ValueError(f"`{name}` is not JSON")  # Python's json accepts NaN/Infinity; JSON does not


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    """Top-level `{...}`/`[...]` spans, in one pass; strings are tracked only inside a span (prose has quotes)."""
    spans: list[tuple[int, int]] = []
    depth, start, in_string, escaped = 0, 0, False, False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch in "{[":
                depth, start = 1, i
            continue
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed value, iteratively, stopping once it passes `limit`."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            level += 1
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            stack.extend((child, level) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _describe(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno}, column {error.colno}"
    return _clip(str(error))


def _clip(message: str) -> str:
    return message if len(message) <= _MESSAGE_CHARS else message[: _MESSAGE_CHARS - 3] + "..."
