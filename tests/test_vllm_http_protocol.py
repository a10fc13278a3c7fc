"""The logic around the token tiers' wire, without a server: prompts extend earlier ids, requests carry every
sampling knob, answers are checked before their ids are trusted, weight versions ride on the bundle.

(Against a real vLLM server: tests/test_vllm_http_model.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gym_serve.calls.batching import BatchedResponses
from gym_serve.deployments.vllm_http_model import (
    VLLMHTTPModelDeployment,
    _version_fields,
    completion_body,
    read_completion,
)
from gym_serve.errors import FailureKind, ModelError, failure_kind
from gym_serve.wire.chat_template import ChatTokenizer
from gym_serve.wire.tokens import check_contiguity, token_response

TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}}}]


def answer(**choice: Any) -> dict[str, Any]:
    base = {
        "text": "hi",
        "token_ids": [5, 2],
        "prompt_token_ids": [1, 2, 3],
        "logprobs": {"tokens": ["token_id:5", "token_id:2"], "token_logprobs": [-0.5, -0.1]},
        "finish_reason": "stop",
    }
    return {"choices": [{**base, **choice}]}


def test_the_tier_takes_micro_batches() -> None:
    assert issubclass(VLLMHTTPModelDeployment.func_or_class, BatchedResponses)


def test_a_request_sends_ids_and_every_sampling_knob() -> None:
    request = {"input": "x", "tools": TOOLS, "tool_choice": "required", "temperature": 0.7, "seed": 3}
    body = completion_body("tiny", [1, 2, 3], 16, request)
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 16 and body["seed"] == 3
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (0.7, 1.0, 0, 0.0)
    assert body["return_token_ids"] and body["return_tokens_as_token_ids"] and body["logprobs"] == 0
    assert "get_weather" in body["structured_outputs"]["regex"]
    free = completion_body("tiny", [1], 4, {"input": "x", "tools": TOOLS})
    assert "structured_outputs" not in free and "seed" not in free and free["temperature"] == 1.0


def test_an_answer_gives_ids_log_probs_and_weight_versions() -> None:
    spans = [{"version": "v7", "start": 0, "end": 1}, {"version": "v8", "start": 1, "end": 2}]
    completion = read_completion(answer(weight_versions=spans), [1, 2, 3])
    assert completion.token_ids == [5, 2] and completion.log_probs == [-0.5, -0.1]
    assert completion.weight_versions == spans
    assert read_completion(answer(), [1, 2, 3]).weight_versions is None  # vLLM 0.32 reports none
    response = token_response("tiny", [], [1, 2, 3], [5, 2], [-0.5, -0.1], "stop", weight_versions=spans)
    assert response["output"][-1]["weight_versions"] == spans and check_contiguity(response).ok


def test_integer_weight_versions_are_the_bundles_policy_versions() -> None:
    """As the vLLM tier reports its own, so the staleness bound and the trainers read one field."""
    spans = [{"version": 3, "start": 0, "end": 2}, {"version": "4", "start": 2, "end": 5}]
    fields = _version_fields(spans)
    assert fields["policy_version"] == 3 and fields["policy_version_spans"] == [[3, 0, 2], [4, 2, 5]]
    named = _version_fields([{"version": "v7", "start": 0, "end": 1}])
    assert "policy_version" not in named and named["weight_versions"] == [{"version": "v7", "start": 0, "end": 1}]
    assert _version_fields(None) == {}


@pytest.mark.parametrize(
    ("choice", "why"),
    [
        ({"token_ids": None}, "no `choices\\[0\\].token_ids`"),
        ({"logprobs": None}, "no `choices\\[0\\].token_ids` or `logprobs"),
        ({"logprobs": {"token_logprobs": [-0.5]}}, "2 generated ids but 1 log-probs"),
        ({"prompt_token_ids": [1, 2, 4]}, "differ from the ids sent"),
        ({"finish_reason": "abort"}, "aborted"),
    ],
)
def test_an_answer_that_cannot_be_trusted_is_a_model_error(choice: dict[str, Any], why: str) -> None:
    with pytest.raises(ModelError, match=why) as info:
        read_completion(answer(**choice), [1, 2, 3])
    assert failure_kind(info.value) is FailureKind.MODEL_ERROR
    with pytest.raises(ModelError, match="without `choices"):
        read_completion({"object": "error"}, [1, 2, 3])


@pytest.fixture(scope="module")
def chat(tiny_model: Path) -> ChatTokenizer:
    from transformers import AutoTokenizer

    return ChatTokenizer(AutoTokenizer.from_pretrained(tiny_model))


def test_a_follow_up_prompt_extends_the_sampled_ids_instead_of_retokenizing(chat: ChatTokenizer) -> None:
    first = {"input": [{"type": "message", "role": "user", "content": "weather in Paris?"}], "tools": TOOLS}
    prompt = chat.prompt_ids(first)
    # the model spelled `<tool_call>` character by character: re-tokenizing its text would give one added token
    call_text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    sampled = [chat.encode(character)[0] for character in call_text] + chat.encode("<|im_end|>")
    item = {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "prompt_token_ids": prompt,
        "generation_token_ids": sampled,
        "generation_log_probs": [-1.0] * len(sampled),
    }
    output = {"type": "function_call_output", "call_id": "c1", "output": '{"weather_description": "rainy"}'}
    follow_up = chat.prompt_ids({**first, "input": [*first["input"], item, output]})
    assert follow_up[: len(prompt) + len(sampled)] == prompt + sampled
    plain = {k: v for k, v in item.items() if not k.endswith(("_token_ids", "_log_probs"))}
    rerendered = chat.prompt_ids({**first, "input": [*first["input"], plain, output]})
    assert rerendered[: len(prompt) + len(sampled)] != prompt + sampled, "re-rendering would have broken it"
