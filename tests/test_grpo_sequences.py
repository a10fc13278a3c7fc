"""The GRPO example's logic without a server: training sequences from token ids, masks, advantages, its config."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from examples.grpo_trainer import NonContiguousRollout, build_sequence, group_advantages
from gym_serve.serving.config import validate_app_args
from tests.conftest import REPO


def call(prompt: list[int], generation: list[int], logprobs: list[float]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "name": "f",
        "arguments": "{}",
        "call_id": "c",
        "prompt_token_ids": prompt,
        "generation_token_ids": generation,
        "generation_log_probs": logprobs,
    }


def rollout(*items: dict[str, Any], reward: float = 1.0) -> dict[str, Any]:
    return {"response": {"output": list(items)}, "reward": reward, "_ng_task_index": 4, "_ng_rollout_index": 1}


def test_a_multi_turn_rollout_trains_only_the_generated_spans() -> None:
    first = call([1, 2, 3], [10, 11], [-0.5, -0.25])
    tool_output = {"type": "function_call_output", "call_id": "c", "output": '{"ok": true}'}
    # the second prompt extends prompt + generation by the tool output's tokens (20, 21, 22)
    second = {**call([1, 2, 3, 10, 11, 20, 21, 22], [12, 13, 14], [-1.0, -2.0, -3.0]), "type": "message"}
    sequence = build_sequence(rollout(first, tool_output, second, reward=0.5))
    assert sequence.token_ids == [1, 2, 3, 10, 11, 20, 21, 22, 12, 13, 14]
    assert sequence.loss_mask == [False, False, False, True, True, False, False, False, True, True, True]
    assert sequence.sampler_logprobs == [0, 0, 0, -0.5, -0.25, 0, 0, 0, -1.0, -2.0, -3.0]
    assert sequence.reward == 0.5 and sequence.group == 4 and sequence.calls == 2


def test_a_rollout_that_breaks_contiguity_is_refused_as_nemo_rl_does() -> None:
    first = call([1, 2, 3], [10, 11], [-0.5, -0.25])
    rerendered = call([1, 2, 3, 99, 20], [12], [-1.0])  # history re-tokenized: 10, 11 became 99
    with pytest.raises(NonContiguousRollout, match=r"rollout \(4, 1\): Non-contiguous messages found! call 2"):
        build_sequence(rollout(first, rerendered))
    with pytest.raises(NonContiguousRollout, match="no model call carries token ids"):
        build_sequence(rollout({"type": "message", "role": "assistant", "content": []}))


def test_advantages_are_relative_to_the_group_and_zero_for_ties() -> None:
    advantages = group_advantages([1.0, 0.0, 0.5, 0.5, 0.3], ["a", "a", "b", "b", "c"])
    assert advantages[0] == pytest.approx(0.7071, abs=1e-3) and advantages[1] == pytest.approx(-0.7071, abs=1e-3)
    assert advantages[2:] == [0.0, 0.0, 0.0], "a tied group and a group of one teach nothing"
    assert sum(group_advantages([0.1, 0.4, 0.9, 0.2], [0, 0, 0, 0])) == pytest.approx(0.0, abs=1e-9)


def test_the_serve_config_of_the_example_is_valid() -> None:
    from ray.serve.schema import ServeDeploySchema

    from gym_serve.deployments.ingress.api import IngressArgs

    config = yaml.safe_load((REPO / "deployments" / "grpo_vllm.yaml").read_text())
    ServeDeploySchema.model_validate(config)
    env_app, ingress = config["applications"]
    args = validate_app_args(env_app["args"], source="deployments/grpo_vllm.yaml", app=env_app["name"])
    assert args.model.kind == "vllm" and args.environment.name == "examples.starts_with_env:StartsWith"
    assert IngressArgs.model_validate(ingress["args"]).agents == [env_app["name"]]


def test_the_trainer_imports_no_ray() -> None:
    code = (
        "import sys, examples.grpo_trainer, torch, transformers; from transformers import AutoModelForCausalLM; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'ray'], 'ray was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=REPO)
