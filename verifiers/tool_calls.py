"""Predicted function calls against expected ones: the same names with the same arguments, as multisets.

A call is `{"name": ..., "arguments": ...}` with the arguments an object or its JSON
text: a Responses `function_call` item, a row of NeMo Gym's `xlam_fc`
`expected_answers`, or a Chat Completions tool call (`{"function": {...}}`).

When arguments are equal, after normalisation:

- key order never matters; list order does;
- numbers compare by value (`1` equals `1.0`); booleans are not numbers (`true` is not `1`);
- a string is not a number or a boolean (`"3"` is not `3`), except:

  * **typed**: where the tool's JSON schema (from `tools`, the list the model was given)
    declares a parameter's type, a value that spells that type exactly is converted
    to it on both sides before comparing: `"3"` → `3` under `integer`, `"2.5"` → `2.5`
    under `number`, `"true"` → `true` under `boolean`, `3` → `"3"` under `string`, a JSON
    text → the object or array under `object`/`array`. The schema, not a dataset's
    incidental typing, says what the value is. Nested `properties` and `items` count.
  * **lenient** (`lenient=True`): anywhere, a string whose text is a JSON number,
    boolean, null, object or array compares as that value.

- **defaults**: a parameter the schema gives a `default` may be omitted: a call without
  it equals a call that passes the default (both sides get the default filled in).

Parallel calls are matched as multisets: order never matters, and each predicted call
can satisfy one expected call. Reward 1.0 only when every expected call is matched and
no predicted call is left over (no expected calls: reward 1.0 only for no calls). This
is stricter than NeMo Gym's `xlam_fc`, which ignores argument keys the expected call
does not name; here an unexpected argument is a wrong argument.

Every call gets a `CallCheck`: `matched`, `wrong_arguments` (paired with the unmatched
predicted call of the same name that differs least, listing each difference),
`missing` (expected, never called) or `extra` (called, not expected).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["MAX_ARGUMENT_CHARS", "CallCheck", "ToolCallsResult", "compare_calls", "normalize_arguments"]

MAX_ARGUMENT_CHARS = 100_000
"""Longest predicted `arguments` text parsed; longer is a wrong call, not a stalled replica."""
_MAX_DEPTH = 64
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_JSON_INTEGER = re.compile(r"-?(?:0|[1-9]\d*)")
_NO = object()

Status = Literal["matched", "wrong_arguments", "missing", "extra"]


@dataclass(frozen=True)
class CallCheck:
    """The verdict on one call: an expected one (`expected_index`), a predicted one, or a pair of both."""

    status: Status
    name: str
    expected_index: int | None = None
    predicted_index: int | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCallsResult:
    """`reward` plus a `CallCheck` per expected call and per predicted call left unmatched."""

    reward: float
    checks: tuple[CallCheck, ...]
    num_expected: int
    num_predicted: int

    @property
    def num_correct(self) -> int:
        return sum(check.status == "matched" for check in self.checks)

    def details(self) -> list[dict[str, Any]]:
        """The checks as plain dicts (for a rollout row)."""
        return [{**asdict(check), "problems": list(check.problems)} for check in self.checks]


class _Invalid(ValueError):
    pass


def compare_calls(
    predicted: Sequence[Mapping[str, Any]],
    expected: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    lenient: bool = False,
) -> ToolCallsResult:
    """Score `predicted` calls against `expected` ones (see the module docstring for the rules).

    Raises `ValueError` naming the call when an *expected* call is malformed (the task's
    bug); a malformed predicted call is simply wrong.
    """
    schemas = _parameter_schemas(tools or [])
    wanted = [_expected(i, call, schemas, lenient) for i, call in enumerate(expected)]
    made = [_predicted(call, schemas, lenient) for call in predicted]

    checks: list[CallCheck] = []
    used: set[int] = set()
    unmatched: list[int] = []
    for i, (name, args) in enumerate(wanted):
        key = _freeze(args)
        j = next(
            (
                j
                for j, (n, a, _) in enumerate(made)
                if j not in used and n == name and a is not None and _freeze(a) == key
            ),
            None,
        )
        if j is None:
            unmatched.append(i)
        else:
            used.add(j)
            checks.append(CallCheck("matched", name, i, j))
    for i in unmatched:
        name, args = wanted[i]
        candidates = [
            (j, _problems(args, a, raw)) for j, (n, a, raw) in enumerate(made) if j not in used and n == name
        ]
        if candidates:
            j, problems = min(candidates, key=lambda c: (len(c[1]), c[0]))
            used.add(j)
            checks.append(CallCheck("wrong_arguments", name, i, j, tuple(problems)))
        else:
            checks.append(CallCheck("missing", name, i, None, (f"no call to `{name}`",)))
    for j, (name, _, _) in enumerate(made):
        if j not in used:
            checks.append(CallCheck("extra", name, None, j, (f"call to `{name}` was not expected",)))
    checks.sort(
        key=lambda c: (
            c.expected_index if c.expected_index is not None else len(wanted),
            c.predicted_index if c.predicted_index is not None else -1,
        )
    )
    perfect = all(check.status == "matched" for check in checks)
    return ToolCallsResult(1.0 if perfect else 0.0, tuple(checks), len(wanted), len(made))


def normalize_arguments(
    arguments: Mapping[str, Any] | str, parameters: Mapping[str, Any] | None = None, *, lenient: bool = False
) -> dict[str, Any]:
    """Arguments (an object or its JSON text) as they are compared, under a tool's `parameters` schema.

    Raises `ValueError` when they are not a JSON object.
    """
    parsed = _parse_arguments(arguments)
    return _normalize(parsed, dict(parameters or {}), lenient, 0)


def _expected(i: int, call: Any, schemas: dict[str, dict[str, Any]], lenient: bool) -> tuple[str, dict[str, Any]]:
    name, arguments = _unwrap(call)
    if not isinstance(name, str) or not name:
        raise ValueError(f"expected call {i} has no `name`: {_clip(repr(call))}")
    try:
        return name, normalize_arguments(arguments, schemas.get(name), lenient=lenient)
    except ValueError as e:
        raise ValueError(f"expected call {i} (`{name}`): {e}") from e


def _predicted(
    call: Any, schemas: dict[str, dict[str, Any]], lenient: bool
) -> tuple[str, dict[str, Any] | None, str | None]:
    """(name, normalized arguments or None, why they could not be read)."""
    name, arguments = _unwrap(call)
    name = name if isinstance(name, str) else ""
    try:
        return name, normalize_arguments(arguments, schemas.get(name), lenient=lenient), None
    except ValueError as e:
        return name, None, str(e)


def _unwrap(call: Any) -> tuple[Any, Any]:
    if not isinstance(call, Mapping):
        return None, None
    if isinstance(call.get("function"), Mapping):  # Chat Completions: {"type": "function", "function": {...}}
        call = call["function"]
    return call.get("name"), call.get("arguments", {})


def _parse_arguments(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            raise ValueError(f"arguments are {len(arguments)} characters; at most {MAX_ARGUMENT_CHARS} are read")
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ValueError(f"arguments are not valid JSON ({e.msg} at position {e.pos})") from e
        except RecursionError as e:
            raise ValueError("arguments are nested too deeply") from e
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise ValueError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return dict(arguments)


def _parameter_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tool name → its `parameters` schema, from Responses (`name`) or Chat (`function.name`) tool lists."""
    schemas: dict[str, dict[str, Any]] = {}
    for entry in tools:
        function = entry.get("function")
        spec = function if isinstance(function, Mapping) else entry
        name, parameters = spec.get("name"), spec.get("parameters")
        if isinstance(name, str) and isinstance(parameters, Mapping):
            schemas[name] = dict(parameters)
    return schemas


def _normalize(value: Any, schema: Any, lenient: bool, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _Invalid(f"arguments are nested more than {_MAX_DEPTH} levels deep")
    schema = schema if isinstance(schema, Mapping) else {}
    value = _coerce(value, _types(schema), lenient)
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        out = {key: _normalize(item, properties.get(key), lenient, depth + 1) for key, item in value.items()}
        for key, prop in properties.items():
            if key not in out and isinstance(prop, Mapping) and "default" in prop:
                out[key] = _normalize(prop["default"], prop, lenient, depth + 1)
        return out
    if isinstance(value, list):
        items = schema.get("items")
        return [_normalize(item, items, lenient, depth + 1) for item in value]
    return value


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    return []


def _coerce(value: Any, types: list[str], lenient: bool) -> Any:
    if types and not any(_fits(value, t) for t in types):
        for t in types:
            converted = _convert(value, t)
            if converted is not _NO:
                return converted
    if lenient and isinstance(value, str) and not types:
        parsed = _spelled(value)
        return value if parsed is _NO else parsed
    return value


def _fits(value: Any, type_name: str) -> bool:
    if isinstance(value, bool):
        return type_name == "boolean"
    return {
        "integer": isinstance(value, int) or (isinstance(value, float) and value.is_integer()),
        "number": isinstance(value, int | float),
        "string": isinstance(value, str),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "null": value is None,
    }.get(type_name, False)


def _convert(value: Any, type_name: str) -> Any:
    """`value` as `type_name` when it spells one exactly, else `_NO`."""
    if isinstance(value, str):
        text = value.strip()
        if type_name == "integer" and _JSON_INTEGER.fullmatch(text):
            return int(text)
        if type_name == "number" and _JSON_NUMBER.fullmatch(text):
            return json.loads(text)
        if type_name == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if type_name == "null" and text == "null":
            return None
        if type_name in ("object", "array") and text[:1] in "{[":
            parsed = _spelled(text)
            return parsed if _fits(parsed, type_name) else _NO
        return _NO
    if type_name == "string" and isinstance(value, int | float | bool):
        return json.dumps(value)
    return _NO


def _spelled(text: str) -> Any:
    """The JSON value a string spells (not a string itself), else `_NO`."""
    if len(text) > MAX_ARGUMENT_CHARS:
        return _NO
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return _NO
    return _NO if isinstance(parsed, str) else parsed


def _freeze(value: Any) -> Any:
    """A hashable form in which equal arguments are equal: numbers by value, booleans apart from numbers."""
    if isinstance(value, dict):
        return ("object", frozenset((key, _freeze(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_freeze(item) for item in value))
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    return (type(value).__name__, value)


def _problems(expected: dict[str, Any], predicted: dict[str, Any] | None, unreadable: str | None) -> list[str]:
    if predicted is None:
        return [unreadable or "arguments could not be read"]
    problems: list[str] = []
    _diff(expected, predicted, "", problems)
    return problems


def _diff(expected: Any, predicted: Any, path: str, problems: list[str]) -> None:
    if _freeze(expected) == _freeze(predicted):
        return
    if isinstance(expected, dict) and isinstance(predicted, dict):
        for key in expected:
            where = f"{path}.{key}" if path else key
            if key not in predicted:
                problems.append(f"`{where}`: missing (expected {_clip(json.dumps(expected[key]))})")
            else:
                _diff(expected[key], predicted[key], where, problems)
        for key in predicted:
            if key not in expected:
                where = f"{path}.{key}" if path else key
                problems.append(f"`{where}`: not expected (got {_clip(json.dumps(predicted[key]))})")
        return
    if isinstance(expected, list) and isinstance(predicted, list) and len(expected) == len(predicted):
        for k, (e, p) in enumerate(zip(expected, predicted, strict=True)):
            _diff(e, p, f"{path}[{k}]", problems)
        return
    problems.append(
        f"`{path or '(arguments)'}`: expected {_clip(json.dumps(expected))}, got {_clip(json.dumps(predicted))}"
    )


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
