"""The data contracts of the trainers that cannot be installed beside gym-serve, copied from their released source.

verl 0.9.1 pins transformers<5.11 (gym-serve's vLLM needs newer), SkyRL 0.4.0
needs Python 3.12 and NeMo RL 0.7.0 Python 3.13, so their adapters are tested
against these copies. Each copy is the part of the trainer that receives what
the adapter returns, kept as close to the source as a test allows, with the
file it comes from; change them only when the trainer's source changes.
"""

from __future__ import annotations

import types
from collections import defaultdict
from typing import Any

import torch
from pydantic import BaseModel

# ---- verl 0.9.1: verl/experimental/agent_loop/agent_loop.py -------------------------------------------------------


class AgentLoopMetrics(BaseModel):
    """Agent loop performance metrics."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    compute_score: float = 0.0
    num_preempted: int = -1  # -1 means not available


class AgentLoopOutput(BaseModel):
    """Agent loop output."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    routed_experts: Any | None = None
    multi_modal_data: dict[str, Any] | None = None
    reward_score: float | None = None
    num_turns: int = 0
    metrics: AgentLoopMetrics
    extra_fields: dict[str, Any] = {}
    mm_processor_kwargs: dict[str, Any] | None = None
    mm_processor_output: list[dict[str, Any]] | None = None


def verl_module() -> types.ModuleType:
    """`verl.experimental.agent_loop.agent_loop` as far as the adapter imports it."""
    module = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    module.AgentLoopMetrics = AgentLoopMetrics  # type: ignore[attr-defined]
    module.AgentLoopOutput = AgentLoopOutput  # type: ignore[attr-defined]
    return module


def verl_padded(output: AgentLoopOutput, prompt_length: int, response_length: int) -> dict[str, torch.Tensor]:
    """What `AgentLoopWorker._agent_loop_postprocess` makes of one output (left-padded prompt, right-padded
    response, `response_mask * response attention`, log-probs padded with 0.0), and the v1 trainer's int cast of
    `min/max_global_steps` (`trainer_base.py`: `np.array(..., dtype=int)`)."""
    assert len(output.prompt_ids) <= prompt_length and len(output.response_ids) <= response_length
    assert len(output.response_mask) == len(output.response_ids) == len(output.response_logprobs or [])
    pad_p, pad_r = prompt_length - len(output.prompt_ids), response_length - len(output.response_ids)
    response_attention = torch.tensor([1] * len(output.response_ids) + [0] * pad_r)
    steps = torch.tensor([output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]])
    return {
        "prompts": torch.tensor([0] * pad_p + output.prompt_ids),
        "responses": torch.tensor(output.response_ids + [0] * pad_r),
        "response_mask": torch.tensor(output.response_mask + [0] * pad_r) * response_attention,
        "rollout_log_probs": torch.tensor((output.response_logprobs or []) + [0.0] * pad_r),
        "global_steps": steps.to(torch.int64),
    }


# ---- SkyRL 0.4.0: skyrl/train/utils/trainer_utils.py (validate_generator_output, not step-wise) -------------------


def validate_generator_output(num_prompts: int, generator_output: dict[str, Any]) -> None:
    if len(generator_output["response_ids"]) <= 0:
        raise RuntimeError("No outputs generated")
    num_responses = len(generator_output["response_ids"])
    assert num_prompts == num_responses, f"Mismatch between prompts ({num_prompts}) and responses ({num_responses})"
    assert num_responses == len(generator_output["prompt_token_ids"])
    for key in ("response_ids", "loss_masks", "rewards", "rollout_logprobs", "stop_reasons", "trajectory_ids"):
        if isinstance(generator_output.get(key), list):
            assert len(generator_output[key]) == num_responses, key
    for i, (response_ids, loss_masks, rewards) in enumerate(
        zip(generator_output["response_ids"], generator_output["loss_masks"], generator_output["rewards"], strict=True)
    ):
        assert len(response_ids) == len(loss_masks), i
        if isinstance(rewards, list):
            assert len(rewards) == len(response_ids), i
        if generator_output["rollout_logprobs"]:
            assert len(response_ids) == len(generator_output["rollout_logprobs"][i]), i
    rewards = generator_output["rewards"]
    assert all(isinstance(r, list) for r in rewards) or all(not isinstance(r, list) for r in rewards)
    # skyrl/train/generators/utils.py: a scalar reward lands on the last response token, so none may be empty
    assert all(len(r) > 0 for r in generator_output["response_ids"])


# ---- NeMo RL v0.7.0: nemo_rl/environments/nemo_gym.py (_postprocess_nemo_gym_to_nemo_rl_result, token part) -------


def nemo_rl_postprocess(nemo_gym_result: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(nemo_gym_result, dict), (
        f"Hit a non-successful response when querying NeMo Gym for rollouts: {nemo_gym_result}"
    )
    message_log: list[dict[str, Any]] = []
    seen_token_ids: list[int] = []
    for item in nemo_gym_result["response"]["output"]:
        if "generation_token_ids" not in item:
            continue
        assert seen_token_ids == item["prompt_token_ids"][: len(seen_token_ids)], "Non-contiguous messages found!"
        prompt_token_ids = item.pop("prompt_token_ids")
        generation_token_ids = item.pop("generation_token_ids")
        generation_log_probs = item.pop("generation_log_probs")
        new_prompt_token_ids = prompt_token_ids[len(seen_token_ids) :]
        message_log.append({"role": "user", "content": "", "token_ids": torch.tensor(new_prompt_token_ids)})
        message_log.append(
            {
                "role": "assistant",
                "content": "",
                "token_ids": torch.tensor(generation_token_ids),
                "generation_logprobs": torch.tensor(generation_log_probs),
            }
        )
        seen_token_ids.extend(new_prompt_token_ids)
        seen_token_ids.extend(generation_token_ids)
    if not message_log:
        raise ValueError("NeMo Gym returned a result with no generation data.")
    return {"message_log": message_log, "input_message_log": message_log[:1], "full_result": nemo_gym_result}


def nemo_rl_groups(results: list[dict[str, Any]]) -> dict[tuple[int, ...], list[float]]:
    """NeMo RL groups by the first message's token ids (algorithms/utils.py)."""
    groups: dict[tuple[int, ...], list[float]] = defaultdict(list)
    for result in results:
        key = tuple(result["input_message_log"][0]["token_ids"].tolist())
        groups[key].append(float(result["full_result"]["reward"]))
    return groups


def nemo_rl_loss_mask(result: dict[str, Any]) -> list[int]:
    """`add_grpo_token_loss_masks_and_generation_logprobs`: 1 on assistant messages that carry generation log-probs."""
    mask: list[int] = []
    for message in result["message_log"]:
        trained = message["role"] == "assistant" and "generation_logprobs" in message
        mask += [int(trained)] * len(message["token_ids"])
    return mask


async def run_like_nemo_rl(rch: Any, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NeMo RL's `NemoGym.run_rollouts` (v0.7.0) loop: completion order, put back in input order by `_rowidx`."""
    rows = [{**example, "_rowidx": i} for i, example in enumerate(examples)]
    results: list[dict[str, Any] | None] = [None] * len(rows)
    for task in rch.run_examples(examples=rows, head_server_config=None):
        row, result = await task
        results[row["_rowidx"]] = nemo_rl_postprocess(result)
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]
