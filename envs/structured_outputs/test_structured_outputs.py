"""Structured outputs: recordings replay right then wrong; NeMo Gym's row fields; strictness; bad rows fail loudly."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schema_str": json.dumps(SCHEMA), "schema_type": "yaml"}, "`schema_type` must be `json` here, got `yaml`"),
        ({}, "exactly one of `schema_str`"),
        ({"schema_str": "{}", "schema": "{}"}, "exactly one of `schema_str`"),
        ({"schema_str": '{"type": "objekt"}'}, "invalid JSON schema at \\$.type"),
        ({"schema_str": '{"type": '}, "the schema is not valid JSON"),
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
