"""Structured outputs: recordings replay right then wrong; NeMo Gym's row fields; strictness; bad rows fail loudly."""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gym_serve import RolloutError, run_local
from gym_serve.testing.fixtures import replay_examples, unique
from gym_serve.wire.jsonl import read_jsonl

from . import StructuredOutputs

ENV = StructuredOutputs
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city"],
}


class Says:
    """A model that answers every request with one text."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        return {
            "id": "r",
            "object": "response",
            "status": "completed",
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": self.text}]}
            ],
        }


class Calls:
    """A model that answers every request with these function calls."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = calls

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        output = [
            {"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": json.dumps(arguments)}
            for i, (name, arguments) in enumerate(self.calls)
        ]
        return {"id": "r", "object": "response", "status": "completed", "output": output}


def row(**fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": "Give the city as JSON."}, **fields}


def example_rows() -> list[dict[str, Any]]:
    return [
        {**r, "_ng_task_index": i, "_ng_rollout_index": 0}
        for i, (_, r) in enumerate(read_jsonl(ENV.data_dir() / "example.jsonl"))
    ]


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(ENV)
    assert len(examples) >= 5
    error_types = set()
    for r, good, bad in examples:
        i = r["_ng_task_index"]
        assert (good["reward"], good["error_type"]) == (1.0, None), i
        assert bad["reward"] == 0.0 and bad["error_message"], i
        error_types.add(bad["error_type"])
    assert error_types == {"parse_error", "validation_error"}, "the wrong answers fail in both ways"


async def test_strict_by_default_as_nemo_gym_scores_and_plain_when_configured() -> None:
    answer = Says('{"city": "Oslo"}')  # `population` is declared but not required by the schema as written
    strict = await run_local(row(schema_str=json.dumps(SCHEMA)), ENV(), answer)
    assert strict["reward"] == 0.0 and "'population' is a required property" in strict["error_message"]
    plain = await run_local(row(schema_str=json.dumps(SCHEMA)), ENV({"strict": False}), answer)
    assert plain["reward"] == 1.0


async def test_nemo_gyms_older_schema_field_loads_too() -> None:
    answer = Says('{"city": "Oslo", "population": "700000"}')
    for fields in ({"schema": json.dumps(SCHEMA)}, {"schema": SCHEMA}, {"schema_str": json.dumps(SCHEMA)}):
        rollout = await run_local(row(**fields, schema_type="json"), ENV(), answer)
        assert (rollout["reward"], rollout["error_path"]) == (0.0, "$.population"), fields


async def test_a_tool_call_row_is_answered_by_one_call_whose_arguments_validate() -> None:
    """NeMo Gym's v4 rows (`response_mode: tool_call`): the episode ends at the call, which nothing runs."""
    tool = {"type": "function", "name": "record", "parameters": {"type": "object", "properties": {"city": SCHEMA}}}
    fields = {"schema_str": json.dumps(SCHEMA), "response_mode": "tool_call", "tool_name": "record"}
    fields |= {"tool_payload_key": "city"}
    task = {"responses_create_params": {"input": "Record the city.", "tools": [tool]}, **fields}
    right = {"city": {"city": "Oslo", "population": 700000}}
    got = await run_local(task, ENV(), Calls(("record", right)))
    assert (got["reward"], got["error_type"]) == (1.0, None)
    assert [i["type"] for i in got["response"]["output"]] == ["function_call"]  # nothing ran, the episode ended
    wrong = {
        "wrong_tool_name": Calls(("other", right)),
        "multiple_tool_calls": Calls(("record", right), ("record", right)),
        "missing_tool_payload_key": Calls(("record", {"town": right["city"]})),
        "validation_error": Calls(("record", {"city": {"city": "Oslo"}})),
        "content_free": Calls(("record", {"city": {"city": "", "population": None}})),
        "missing_tool_call": Says('{"city": "Oslo", "population": 700000}'),
    }
    loose = {**SCHEMA, "properties": {**SCHEMA["properties"], "population": {"type": ["integer", "null"]}}}
    for kind, model in wrong.items():
        schema = loose if kind == "content_free" else SCHEMA
        got = await run_local({**task, "schema_str": json.dumps(schema)}, ENV(), model)
        assert (got["reward"], got["error_type"]) == (0.0, kind), (kind, got["error_message"])


async def test_a_content_free_answer_is_paid_only_where_the_schema_admits_nothing_else() -> None:
    """`[]` validates an array schema without `minItems`: NeMo Gym pays it; here it scores 0 unless configured."""
    schema = json.dumps({"type": "array", "items": {"type": "string"}})
    empty = await run_local(row(schema_str=schema), ENV(), Says("[]"))
    assert (empty["reward"], empty["error_type"]) == (0.0, "content_free")
    assert (await run_local(row(schema_str=schema), ENV({"pay_content_free": True}), Says("[]")))["reward"] == 1.0
    assert (await run_local(row(schema_str=schema), ENV(), Says('["Oslo"]')))["reward"] == 1.0
    nothing_else = json.dumps({"type": "array", "maxItems": 0})
    assert (await run_local(row(schema_str=nothing_else), ENV(), Says("[]")))["reward"] == 1.0


async def test_formats_are_checked_only_when_configured_as_nemo_gym_does_not() -> None:
    schema = json.dumps({"type": "object", "properties": {"email": {"type": "string", "format": "email"}}})
    answer = Says('{"email": "not an email"}')
    assert (await run_local(row(schema_str=schema), ENV(), answer))["reward"] == 1.0
    checked = await run_local(row(schema_str=schema), ENV({"check_formats": True}), answer)
    assert (checked["reward"], checked["error_path"]) == (0.0, "$.email")


async def test_answers_that_stalled_or_broke_jsonschema_are_scored() -> None:
    """jsonschema's `uniqueItems` compares every pair of objects (142 s for these 10,000, past the deadline: a
    `verifier_timeout`), and its `multipleOf` raises `OverflowError` on an integer no float holds (a failed
    verify): masked rows the answer alone bought. Each is decided, at once, as the 1 or 0 it earns."""
    unique = {
        "type": "array",
        "uniqueItems": True,
        "items": {"type": "object", "properties": {"id": {"type": "integer"}}},
    }
    many = [{"id": i} for i in range(10_000)]
    started = time.monotonic()
    distinct = await run_local(row(schema_str=json.dumps(unique)), ENV(), Says(json.dumps(many)))
    repeated = await run_local(row(schema_str=json.dumps(unique)), ENV(), Says(json.dumps([*many, {"id": 7}])))
    assert time.monotonic() - started < 10
    assert (distinct["reward"], repeated["reward"], repeated["error_type"]) == (1.0, 0.0, "validation_error")
    steps = json.dumps({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2.5}}})
    huge = await run_local(row(schema_str=steps), ENV(), Says('{"n": 1' + "0" * 400 + "}"))
    assert (huge["reward"], huge["error_type"]) == (1.0, None), "10**400 is a multiple of 2.5, decided exactly"
    for number in ("1" + "0" * 399 + "1", "1e400"):  # not one; and a number that parses to infinity
        wrong = await run_local(row(schema_str=steps), ENV(), Says(f'{{"n": {number}}}'))
        assert (wrong["reward"], wrong["error_type"]) == (0.0, "validation_error"), number


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schema_str": json.dumps(SCHEMA), "schema_type": "yaml"}, "`schema_type` must be `json` here, got `yaml`"),
        ({}, "exactly one of `schema_str`"),
        ({"schema_str": "{}", "schema": "{}"}, "exactly one of `schema_str`"),
        ({"schema_str": '{"type": "objekt"}'}, "`schema_str`: invalid JSON schema at \\$.type"),
        ({"schema_str": '{"type": '}, "`schema_str`: the schema is not valid JSON"),  # the field named (issue 29)
        ({"schema": '{"type": '}, "`schema`: the schema is not valid JSON"),
    ],
)
async def test_a_bad_row_fails_the_rollout_instead_of_scoring_zero(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RolloutError, match=message) as info:
        await run_local(row(**fields), ENV(), Says("{}"))
    assert info.value.kind == "bad_input"


@pytest.mark.serve
async def test_the_app_from_its_yaml_rolls_out_through_handles(serve_instance: None) -> None:
    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import load_serve_config

    path = Path(str(resources.files("gym_serve.deployments") / "structured_outputs.yaml"))
    (spec,) = load_serve_config(path)
    name = unique(spec.name)
    handle = serve.run(build_app(spec.app_args(str(path))), name=name, route_prefix=None)
    rows = example_rows()
    rollouts = [await handle.run.remote(r) for r in rows]
    assert [r["reward"] for r in rollouts] == [1.0] * len(rows)
    assert all("error_path" in r for r in rollouts)
    serve.delete(name)
