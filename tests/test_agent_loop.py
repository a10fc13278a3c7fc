"""The tool loop's logic, with a scripted model (a unit test of the loop, not of a model)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gym_serve import AgentConfig, Environment, RolloutError, Verdict, run_local, tool


class Calculator(Environment):
    @tool
    async def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tool
    async def explode(self) -> str:
        """Always fails."""
        raise RuntimeError("boom")

    async def verify(self, task, response, state) -> Verdict:
        return Verdict(reward=1.0 if "5" in response.output_text() else 0.0, fields={"checked": True})


class ScriptedModel:
    """Answers with the next scripted output, and records every request it saw."""

    def __init__(self, *outputs: list[dict[str, Any]], status: str = "completed") -> None:
        self.outputs = list(outputs)
        self.requests: list[dict[str, Any]] = []
        self.status = status

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        self.requests.append(request)
        output = self.outputs.pop(0) if self.outputs else [call("add", '{"a": 1, "b": 1}')]
        return {
            "id": "r",
            "object": "response",
            "output": output,
            "status": self.status,
            "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
        }


def call(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id, "id": "fc"}


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


ROW = {
    "responses_create_params": {"input": "what is 2 + 3?"},
    "_ng_task_index": 4,
    "_ng_rollout_index": 1,
    "custom_field": {"kept": True},
}


def tool_outputs(rollout: dict[str, Any]) -> list[str]:
    return [item["output"] for item in rollout["response"]["output"] if item["type"] == "function_call_output"]


async def test_tool_call_then_answer() -> None:
    model = ScriptedModel([call("add", '{"a": 2, "b": 3}')], [message("It is 5.")])
    rollout = await run_local(ROW, Calculator(), model)
    assert rollout["reward"] == 1.0 and rollout["checked"] is True
    assert tool_outputs(rollout) == ["5"]
    assert rollout["custom_field"] == {"kept": True}, "unknown row fields are preserved"
    assert rollout["_ng_task_index"] == 4 and rollout["_ng_rollout_index"] == 1
    assert rollout["response"]["usage"]["total_tokens"] == 24
    second = model.requests[1]["input"]
    assert [item.get("type") for item in second] == ["message", "function_call", "function_call_output"]
    assert model.requests[0]["tools"][0]["name"] in {"add", "explode"}, "the env's tools are offered by default"


@pytest.mark.parametrize(
    ("bad_call", "expected"),
    [
        (call("multiply", '{"a": 2}'), "there is no tool named `multiply`. Available tools: `add`, `explode`"),
        (call("add", '{"a": 2, "b":'), "arguments for `add` are not valid JSON"),
        (call("add", '{"a": 2}'), "invalid arguments for `add`: `b`: Field required"),
        (call("add", '{"a": "two", "b": 3}'), "`a`: Input should be a valid integer"),
        (call("explode", "{}"), "tool `explode` failed: RuntimeError: boom"),
    ],
)
async def test_bad_tool_calls_become_errors_the_model_sees(bad_call: dict[str, Any], expected: str) -> None:
    model = ScriptedModel([bad_call], [call("add", '{"a": 2, "b": 3}', "c2")], [message("5")])
    rollout = await run_local(ROW, Calculator(), model)
    first = tool_outputs(rollout)[0]
    assert first.startswith("Error: ") and expected in first
    assert model.requests[1]["input"][-1]["output"] == first, "the model sees the error text"
    assert rollout["reward"] == 1.0, "the rollout goes on after the mistake"


async def test_parallel_calls_each_get_an_output_in_order() -> None:
    model = ScriptedModel([call("add", '{"a": 1, "b": 1}', "x"), call("add", '{"a": 2, "b": 2}', "y")], [message("5")])
    rollout = await run_local(ROW, Calculator(), model)
    outputs = [i for i in rollout["response"]["output"] if i["type"] == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [("x", "2"), ("y", "4")]


async def test_max_steps_ends_an_endless_tool_loop() -> None:
    model = ScriptedModel()  # calls `add` forever
    rollout = await run_local(ROW, Calculator(), model, AgentConfig(max_steps=3))
    assert len(model.requests) == 3
    assert rollout["reward"] == 0.0


async def test_incomplete_response_ends_the_episode() -> None:
    model = ScriptedModel([call("add", '{"a": 2, "b": 3}')], status="incomplete")
    rollout = await run_local(ROW, Calculator(), model)
    assert len(model.requests) == 1 and rollout["response"]["status"] == "incomplete"


async def test_a_reasoning_only_turn_ends_the_episode_unfinished_as_nemo_gyms_simple_agent_does() -> None:
    reasoning = {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "hmm"}]}
    model = ScriptedModel([reasoning], [message("5")])
    rollout = await run_local(ROW, Calculator(), model)
    assert len(model.requests) == 1, "not asked again"
    assert rollout["truncated"] and not rollout["terminated"] and rollout["reward"] == 0.0
    response = rollout["response"]
    assert response["status"] == "incomplete"
    assert response["metadata"]["ng_termination_reason"] == "incomplete_reasoning"


async def test_model_failure_fails_the_rollout_with_a_class() -> None:
    class Broken:
        async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
            raise ConnectionError("endpoint down")

    with pytest.raises(RolloutError) as info:
        await run_local(ROW, Calculator(), Broken())
    assert info.value.kind == "model_error"
    assert "endpoint down" in str(info.value)


async def test_verify_failure_is_a_verifier_error() -> None:
    class Strict(Calculator):
        async def verify(self, task, response, state) -> float:
            raise ValueError("cannot parse")

    with pytest.raises(RolloutError) as info:
        await run_local(ROW, Strict(), ScriptedModel([message("5")]))
    assert info.value.kind == "verifier_error"


async def test_rollout_row_is_json() -> None:
    rollout = await run_local(ROW, Calculator(), ScriptedModel([message("5")]))
    assert json.loads(json.dumps(rollout))["reward"] == 1.0


async def test_an_env_whose_calls_are_the_answer_ends_at_the_first_call_and_runs_nothing() -> None:
    class JudgeCalls(Calculator):
        execute_tool_calls = False

        async def verify(self, task, response, state) -> Verdict:
            calls = [(i["name"], json.loads(i["arguments"])) for i in response.output if i["type"] == "function_call"]
            return Verdict(reward=1.0 if calls == [("add", {"a": 2, "b": 3})] else 0.0)

    row_tools = [{"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}]
    row = {**ROW, "responses_create_params": {"input": "2 + 3?", "tools": row_tools}}
    model = ScriptedModel([call("add", '{"a": 2, "b": 3}'), call("explode", "{}", "c2")], [message("never asked")])
    rollout = await run_local(row, JudgeCalls(), model)
    assert len(model.requests) == 1, "no second model call"
    assert model.requests[0]["tools"] == row_tools, "the row's tools are what the model sees"
    assert [i["type"] for i in rollout["response"]["output"]] == ["function_call", "function_call"]
    assert tool_outputs(rollout) == [], "`explode` would have produced an error output had it run"
    assert rollout["reward"] == 0.0, "verify saw both calls"
    plain = await run_local(row, JudgeCalls(), ScriptedModel([message("It is 5.")]))
    assert plain["reward"] == 0.0 and len(plain["response"]["output"]) == 1


async def test_the_row_says_which_policy_versions_sampled_its_tokens_and_how_much_prompt_was_cached() -> None:
    def bundle(item: dict[str, Any], spans: list[list[int]]) -> dict[str, Any]:
        tokens = {"prompt_token_ids": [1], "generation_token_ids": [2] * spans[-1][2], "generation_log_probs": []}
        return {**item, **tokens, "policy_version": spans[0][0], "policy_version_spans": spans}

    class Versioned(ScriptedModel):
        async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
            response = await super().responses(request, session)
            return {**response, "usage": {**response["usage"], "input_tokens_details": {"cached_tokens": 4}}}

    first = bundle(call("add", '{"a": 2, "b": 3}'), [[3, 0, 2]])
    second = bundle(message("It is 5."), [[3, 0, 1], [4, 1, 5]])  # an update landed during this call
    rollout = await run_local(ROW, Calculator(), Versioned([first], [second]))
    assert (rollout["policy_version_min"], rollout["policy_version_max"]) == (3, 4)
    assert rollout["response"]["usage"]["input_tokens_details"] == {"cached_tokens": 8}
    plain = await run_local(ROW, Calculator(), ScriptedModel([message("5")]))
    assert "policy_version_min" not in plain, "a model without versions adds none"
