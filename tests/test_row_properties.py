"""Arbitrary rows through the row checks: each row is accepted, or refused with a field path; never an exception.

Two checks meet every row: `row_problems` (the protocol's `InputRow`, where rows enter: a file, `/run`,
`/v1/rollouts`) and the environment's own `Task` model (where the Environment tier reads the row). The rows
are arbitrary JSON and, mostly, real example rows with one thing changed (`tests.properties.mutated`).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gym_serve.environment.registry import available_environments, load_environment_class
from gym_serve.testing.fixtures import example_rows
from gym_serve.wire.jsonl import unwritable
from gym_serve.wire.responses import MAX_DEPTH, InputRow, _schema_problem, row_problems

from .properties import BOUNDED, json_values, mutated

ENVIRONMENTS = available_environments()
EXAMPLES = [row for name in ENVIRONMENTS for row in example_rows(name)]


def located(path: str, row: Any) -> bool:
    """A field path names a field of the row (its first part is one of the row's keys), or the row itself."""
    if path == "(row)":
        return True
    return isinstance(row, dict) and path.split(".")[0] in row or path.split(".")[0] in InputRow.model_fields


@BOUNDED
@given(st.one_of(json_values, mutated(EXAMPLES), mutated(EXAMPLES)))
def test_row_problems_accepts_a_row_or_names_each_problems_field(row: Any) -> None:
    problems = row_problems(row)
    try:  # the protocol's model, and nothing in the row a writer could not write
        InputRow.model_validate(row, strict=True)
        valid = isinstance(row, dict) and unwritable(row, max_depth=MAX_DEPTH) is None
    except ValidationError:
        valid = False
    assert (problems == []) == valid, problems
    for field, message in problems:
        assert isinstance(field, str) and field and isinstance(message, str) and message
        assert located(field, row), (field, row)


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_an_environments_task_model_accepts_a_row_or_names_the_field(name: str) -> None:
    cls = load_environment_class(name)
    rows = example_rows(name)

    @BOUNDED
    @given(st.one_of(mutated(rows), mutated(rows), json_values))
    def check(row: Any) -> None:
        try:
            cls.Task.model_validate(row)
        except ValidationError as e:
            for error in e.errors():  # a field's path; a rule over several fields names them in its message
                assert error["loc"] or "`" in error["msg"] or error["type"] == "model_type", error

    check()


# ---- what the properties found, held as regressions -----------------------------------------------------------


def nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize("levels", [40, 49, 120, 400])
def test_a_tool_schema_too_deep_for_the_checker_is_a_problem_named_not_a_crash(levels: int) -> None:
    """Found: jsonschema's metaschema check recursed until RecursionError from ~90 levels of `properties`,
    which escaped `row_problems` and stopped a whole collection (or answered 500)."""
    tool = {"type": "function", "name": "f", "parameters": nested_schema(levels)}
    problems = row_problems({"responses_create_params": {"input": "hi", "tools": [tool]}})
    if 2 * levels + 5 <= MAX_DEPTH:  # the row's own levels, the tool's, its `parameters`' and the schema's
        assert problems == []
    else:
        (field, message), *_ = problems
        assert field.startswith("responses_create_params.tools.0.parameters.properties.a")
        assert f"nested more than {MAX_DEPTH} levels deep" in message


def test_a_row_nested_deeper_than_the_writers_go_is_refused_at_the_field() -> None:
    """Found: a task field nested 255 levels passed the checks, then orjson refused to write the row (the
    materialized inputs, the output), which stopped the collection."""
    deep: Any = {}
    for _ in range(300):
        deep = {"k": deep}
    (field, message), *_ = row_problems({"responses_create_params": {"input": "hi"}, "notes": deep})
    assert field == "notes" + ".k" * (MAX_DEPTH - 1) and "nested more than" in message


def test_a_schema_that_trips_the_checkers_recursion_is_a_problem_not_a_crash() -> None:
    """The guard behind `MAX_DEPTH`: wherever the checker's recursion gives out (a deep stack, a lower limit),
    the schema is a problem named at its field."""
    tool = {"type": "function", "name": "f", "parameters": nested_schema(30)}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        problems = row_problems({"responses_create_params": {"input": "x", "tools": [tool]}})
    finally:
        sys.setrecursionlimit(limit)
        _schema_problem.cache_clear()  # what it found under the low limit is not the schema's verdict
    assert problems == [
        ("responses_create_params.tools.0.parameters", "not a valid JSON Schema: nested too deeply to check")
    ]


def test_an_integer_the_writer_cannot_write_is_refused_at_its_field() -> None:
    """Found by fuzzing the ingress: an integer beyond 64 bits in a row (any task field) passed the checks, then
    orjson refused to write the row: the model call failed (502), and a collection would lose the rollout."""
    row = {"responses_create_params": {"input": "hi"}, "task": {"seeds": [1, 2**64]}}
    assert row_problems(row) == [("task.seeds.1", "the integer 18446744073709551616 is beyond 64 bits")]
    assert row_problems({**row, "task": {"seeds": [1, 2**64 - 1, -(2**63)]}}) == []


def test_a_value_pydantic_would_coerce_is_refused_as_the_row_goes_on_as_it_is() -> None:
    """Found by fuzzing the ingress: `parallel_tool_calls: 0` and `temperature: "0.5"` passed (pydantic's lax mode
    coerces them), and went on to the model as they were."""
    for params, field in (
        ({"parallel_tool_calls": 0}, "responses_create_params.parallel_tool_calls"),
        ({"temperature": "0.5"}, "responses_create_params.temperature"),
        ({"max_output_tokens": 5.0}, "responses_create_params.max_output_tokens"),
    ):
        (found, _), *_ = row_problems({"responses_create_params": {"input": "hi", **params}})
        assert found == field
