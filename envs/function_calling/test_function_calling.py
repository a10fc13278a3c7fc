"""Function calling: calls are judged, never run; recordings replay right then wrong; details say what was wrong."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from gym_serve import RolloutError, run_local
from gym_serve.analysis.reverify import reverify
from gym_serve.testing.fixtures import replay_examples, unique
from gym_serve.wire.jsonl import dumps, read_jsonl

from . import FunctionCalling

ENV = FunctionCalling
TOOLS = [
    {
        "type": "function",
        "name": "book",
        "parameters": {"type": "object", "properties": {"guests": {"type": "integer"}, "city": {"type": "string"}}},
    }
]


class Calls:
    """A model that answers with the given function calls, and counts how often it was asked."""

    def __init__(self, *calls: tuple[str, str]) -> None:
        self.calls, self.requests = calls, 0

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        self.requests += 1
        return {
            "id": "r",
            "object": "response",
            "status": "completed",
            "output": [
                {"type": "function_call", "name": name, "arguments": arguments, "call_id": f"c{k}", "id": f"f{k}"}
                for k, (name, arguments) in enumerate(self.calls)
            ],
        }


def row(expected: list[dict[str, Any]], tools: list[dict[str, Any]] | None = TOOLS) -> dict[str, Any]:
    params: dict[str, Any] = {"input": "Book for 2 in Oslo."}
    if tools is not None:
        params["tools"] = tools
    return {"responses_create_params": params, "expected_answers": expected}


def example_rows() -> list[dict[str, Any]]:
    return [
        {**r, "_ng_task_index": i, "_ng_rollout_index": 0}
        for i, (_, r) in enumerate(read_jsonl(ENV.data_dir() / "example.jsonl"))
    ]


async def test_example_rollouts_carry_the_verifier_fields() -> None:
    examples = await replay_examples(ENV)
    assert len(examples) >= 5 and any(len(r["expected_answers"]) >= 2 for r, _, _ in examples), "a parallel-call row"
    for r, good, bad in examples:
        i = r["_ng_task_index"]
        assert good["reward"] == 1.0 and good["num_correct"] == len(r["expected_answers"]), i
        assert bad["reward"] == 0.0 and any(c["status"] != "matched" for c in bad["call_checks"]), i
        for rollout in (good, bad):
            kinds = [item["type"] for item in rollout["response"]["output"]]
            assert "function_call_output" not in kinds and len(kinds) == max(1, rollout["num_predicted"]), i


async def test_the_calls_end_the_episode_and_nothing_runs() -> None:
    model = Calls(("book", '{"guests": 2, "city": "Oslo"}'))
    rollout = await run_local(row([{"name": "book", "arguments": {"guests": 2, "city": "Oslo"}}]), ENV(), model)
    assert model.requests == 1 and rollout["reward"] == 1.0
    assert rollout["predicted_calls"] == [{"name": "book", "arguments": {"guests": 2, "city": "Oslo"}}]
    assert (rollout["num_expected"], rollout["num_predicted"], rollout["num_correct"]) == (1, 1, 1)


async def test_the_rows_tool_schemas_type_the_arguments_and_lenient_goes_further() -> None:
    expected = [{"name": "book", "arguments": '{"guests": 2, "city": "Oslo"}'}]  # JSON text, as rows may hold it
    typed = Calls(("book", '{"city": "Oslo", "guests": "2"}'))
    assert (await run_local(row(expected), ENV(), typed))["reward"] == 1.0
    untyped = await run_local(row(expected, tools=None), ENV(), typed)
    assert untyped["reward"] == 0.0
    assert untyped["call_checks"][0]["problems"] == ['`guests`: expected 2, got "2"']
    assert (await run_local(row(expected, tools=None), ENV({"lenient": True}), typed))["reward"] == 1.0


async def test_unreadable_calls_are_wrong_and_reported_as_sent() -> None:
    rollout = await run_local(row([{"name": "book", "arguments": {}}]), ENV(), Calls(("book", '{"guests": ')))
    assert rollout["reward"] == 0.0 and rollout["predicted_calls"][0]["arguments"] == '{"guests": '
    assert "not valid JSON" in rollout["call_checks"][0]["problems"][0]


@pytest.mark.parametrize("arguments", ['{"guests": ' + "9" * 30 + "}", '{"guests": ' + "[" * 300 + "]" * 300 + "}"])
async def test_arguments_the_writer_cannot_write_are_reported_as_sent(arguments: str) -> None:
    """Parsed, these would make the rollout row one the rollout file's writer (orjson) refuses, and lose it."""
    rollout = await run_local(row([{"name": "book", "arguments": {"guests": 2}}]), ENV(), Calls(("book", arguments)))
    assert rollout["reward"] == 0.0 and rollout["predicted_calls"][0]["arguments"] == arguments
    assert dumps(rollout)


async def test_a_malformed_expected_call_fails_the_rollout() -> None:
    with pytest.raises(RolloutError, match="expected call 0 has no `name`") as info:
        await run_local(row([{"arguments": {}}]), ENV(), Calls())
    assert info.value.kind == "verifier_error"


async def test_reverify_rescores_recordings_without_running_their_calls(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_text((ENV.data_dir() / "example_rollouts.jsonl").read_text())
    report = await reverify(path, {"*": "function_calling"})
    assert report["changed"] == [] and report["agents"][""]["rows"] == 14
    rescored = [json.loads(line) for line in Path(report["output"]).read_text().splitlines()]
    assert [r["reward"] for r in rescored] == [1.0, 0.0] * 7


@pytest.mark.serve
async def test_the_app_from_its_yaml_rolls_out_through_handles(serve_instance: None) -> None:
    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import load_serve_config

    path = Path(str(resources.files("gym_serve.deployments") / "function_calling.yaml"))
    (spec,) = load_serve_config(path)
    name = unique(spec.name)
    handle = serve.run(build_app(spec.app_args(str(path))), name=name, route_prefix=None)
    rows = example_rows()
    rollouts = [await handle.run.remote(r) for r in rows]
    assert [r["reward"] for r in rollouts] == [1.0] * len(rows)
    assert [r["num_predicted"] for r in rollouts] == [len(r["expected_answers"]) for r in rows]
    assert all(i["type"] != "function_call_output" for r in rollouts for i in r["response"]["output"])
    serve.delete(name)
