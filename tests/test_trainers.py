"""The trainer adapters without a model server: the shared sequence builder, bad input, each adapter's logic.

Rollouts here are token-bundle rows made by `CannedSource` (a stand-in for gym-serve's rollout stream, for the
logic around it); `tests/test_trainers_vllm.py` runs the same adapters on real vLLM rollouts, and verl, SkyRL and
NeMo RL against their real packages in their own environments. TRL is the real package (its GRPOTrainer trains on
CPU here).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gym_serve.models.tiny_model import make_tiny_model
from gym_serve.rollout.local import run_local
from gym_serve.rollout.replay import ReplayModel
from gym_serve.testing.fixtures import example_rows
from gym_serve.trainers.nemo_rl import GymServeRolloutCollection
from gym_serve.trainers.openrlhf import executor_output
from gym_serve.trainers.sequence import (
    MissingTokenIds,
    NonContiguousRollout,
    PromptTooLong,
    RolloutFailed,
    build_sequence,
    group_advantages,
    group_sequences,
)
from gym_serve.trainers.skyrl import GymServeGenerator, generator_output
from gym_serve.trainers.source import run_groups
from gym_serve.trainers.trl import TRLRollouts, checkpoint_push, gym_reward
from gym_serve.trainers.trl_async import GymServeWeightTransfer, rollout_samples
from gym_serve.trainers.verl import agent_loop_fields

EOS = 2


def bundle(prompt: list[int], generation: list[int], logprobs: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "x"}],
        "prompt_token_ids": prompt,
        "generation_token_ids": generation,
        "generation_log_probs": logprobs,
        **extra,
    }


def two_turn(task: int, k: int, reward: float, **extra: Any) -> dict[str, Any]:
    """Call 1 samples a tool call (10, 11), the tool answers (20, 21, 22), call 2 samples the reply (30+k, EOS)."""
    prompt = [1, 5, 6 + task]
    first = {**bundle(prompt, [10, 11], [-0.5, -0.25], **extra), "type": "function_call"}
    second = bundle([*prompt, 10, 11, 20, 21, 22], [30 + k, EOS], [-1.0, -0.125], **extra)
    tool = {"type": "function_call_output", "call_id": "c", "output": "{}"}
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"task {task}"}]},
        "_ng_task_index": task,
        "_ng_rollout_index": k,
        "reward": reward,
        "mask_sample": False,
        "truncated": False,
        "response": {"output": [first, tool, second]},
        "_gs_timings": {"model_s": 0.25, "tool_s": 0.125, "verify_s": 0.0625},
    }


def failed(row: dict[str, Any], k: int) -> dict[str, Any]:
    return {**row, "_ng_rollout_index": k, "_ng_failure_class": "model_error", "error": "503", "attempts": 3}


class CannedSource:
    """Rollouts shaped as gym-serve's stream gives them (out of order); `fail` names (task, rollout) keys to fail."""

    def __init__(self, fail: frozenset[tuple[int, int]] = frozenset()) -> None:
        self.fail = fail
        self.requests: list[tuple[list[dict[str, Any]], int, dict[str, Any]]] = []

    async def __aenter__(self) -> CannedSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def rollouts(self, rows: Any, *, num_repeats: int = 1, **sampling: Any) -> Any:
        rows = list(rows)
        self.requests.append((rows, num_repeats, sampling))
        for row in rows:
            for k in reversed(range(num_repeats)):  # completion order is not input order
                task = row["_ng_task_index"]
                if (task, k) in self.fail:
                    yield failed(row, k)
                else:
                    yield {**two_turn(task, k, float(k)), **{f: row[f] for f in ("agent_ref",) if f in row}}


# ---- the shared builder ---------------------------------------------------------------------------------------------


def test_a_multi_turn_rollout_is_one_sequence_that_trains_only_the_sampled_tokens() -> None:
    s = build_sequence(two_turn(4, 1, 0.5, policy_version=7))
    assert s.prompt_ids == [1, 5, 10]
    assert s.completion_ids == [10, 11, 20, 21, 22, 31, EOS]
    assert s.completion_mask == [1, 1, 0, 0, 0, 1, 1], "the tool output between the turns is masked"
    assert s.completion_logprobs == [-0.5, -0.25, 0.0, 0.0, 0.0, -1.0, -0.125]
    assert (s.reward, s.trainable, s.calls, s.task_index, s.rollout_index) == (0.5, True, 2, 4, 1)
    assert (s.policy_version_min, s.policy_version_max) == (7, 7)
    assert build_sequence(two_turn(4, 1, 0.5)).policy_version_min is None, "no version reported: unknown"


def test_a_rollout_its_verifier_masks_keeps_its_tokens_but_trains_nothing_and_is_unscored() -> None:
    s = build_sequence({**two_turn(0, 0, 1.0), "mask_sample": True})
    assert s.completion_ids and not any(s.completion_mask) and s.reward is None and not s.trainable


async def test_a_rollout_from_a_model_tier_without_token_ids_is_refused_by_every_adapter() -> None:
    """A real text-only rollout (the replay model gives no token ids, as `kind: openai` gives none)."""
    from gym_serve.environment.registry import load_environment_class

    env = load_environment_class("example_single_tool_call")
    row = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 3, "_ng_rollout_index": 1}
    rollout = await run_local(row, env(), ReplayModel.for_environment(env))
    assert "reward" in rollout and "_ng_failure_class" not in rollout
    message = r"rollout \(task 3, rollout 1\) carries no token ids.*kind: vllm.*kind: vllm_http.*never re-tokenizes"
    with pytest.raises(MissingTokenIds, match=message):
        build_sequence(rollout)
    with pytest.raises(MissingTokenIds):
        agent_loop_fields(rollout, prompt_length=512, response_length=512)
    with pytest.raises(MissingTokenIds):
        generator_output([[rollout]], eos_token_id=EOS)
    with pytest.raises(MissingTokenIds):
        rollout_samples([rollout], group_id=0, model_version=0)
    with pytest.raises(MissingTokenIds):
        executor_output(rollout, prompt="p", label="{}", images=None, prompt_ids=[1], logprobs=True)

    class TextOnly(CannedSource):
        async def rollouts(self, rows: Any, *, num_repeats: int = 1, **sampling: Any) -> Any:
            for r in rows:
                yield {**rollout, "_ng_task_index": r["_ng_task_index"], "_ng_rollout_index": 0}

    with pytest.raises(MissingTokenIds):
        await collect_like_nemo_rl(GymServeRolloutCollection(TextOnly), [row])


def test_a_rollout_whose_calls_do_not_extend_each_other_is_refused_as_nemo_rl_does() -> None:
    rollout = two_turn(0, 0, 1.0)
    rollout["response"]["output"][2]["prompt_token_ids"][3] = 99  # history re-tokenized differently
    with pytest.raises(NonContiguousRollout, match=r"\(task 0, rollout 0\): Non-contiguous messages found! call 2"):
        build_sequence(rollout)


def test_a_failed_rollout_is_masked_on_its_groups_prompt_or_refused_where_the_trainer_wants_that() -> None:
    group = [two_turn(0, 0, 1.0), failed(two_turn(0, 1, 0.0), 1)]
    kept, placeholder = group_sequences(group, EOS)
    assert placeholder.prompt_ids == kept.prompt_ids and placeholder.completion_ids == [EOS]
    assert placeholder.completion_mask == [0] and placeholder.reward is None and placeholder.failure == "model_error"
    (alone,) = group_sequences([failed(two_turn(0, 1, 0.0), 1)], EOS)
    assert alone.prompt_ids == [EOS] and not alone.trainable
    with pytest.raises(RolloutFailed, match=r"\(task 0, rollout 1\) failed \(model_error\) after 3 attempt"):
        build_sequence(group[1])


def test_group_advantages_are_trls_async_workers() -> None:
    rewards = [0.25, 1.0, None, 0.5]
    scored = np.array([0.25, 1.0, 0.5])
    expected = (scored - scored.mean()) / (scored.std() + 1e-8)  # async_rollout_worker.py, population std
    got = group_advantages(rewards)
    assert got[2] == 0.0 and np.allclose([got[0], got[1], got[3]], expected, atol=1e-12)
    assert group_advantages([0.5, 0.5]) == [0.0, 0.0] and group_advantages([None]) == [0.0]


async def test_run_groups_gives_each_task_its_rollouts_in_order_whatever_order_they_finish_in() -> None:
    source = CannedSource()
    rows = [{"responses_create_params": {"input": []}}] * 3
    groups = await run_groups(source, rows, [2, 3, 2], temperature=0.5)
    assert [[r["_ng_rollout_index"] for r in g] for g in groups] == [[0, 1], [0, 1, 2], [0, 1]]
    assert [[r["_ng_task_index"] for r in g] for g in groups] == [[0, 0], [1, 1, 1], [2, 2]]
    assert sorted(n for _, n, _ in source.requests) == [2, 3], "one request per group size"
    assert all(sampling == {"temperature": 0.5} for _, _, sampling in source.requests)


# ---- TRL (the real package) ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_trl_trains_with_a_failed_rollout_unscored_and_masked_and_pushes_weights_between_steps(
    tiny_model: Path,
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    captured: list[dict[str, Any]] = []

    class Recording(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            batch = super()._generate_and_score_completions(inputs)
            captured.append({k: v.detach().clone() for k, v in batch.items() if isinstance(v, torch.Tensor)})
            return batch

    pushes: list[tuple[Path, int]] = []
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(2)]
    push = checkpoint_push(tiny_model.parent / "pushed", lambda path, v: pushes.append((path, v)))
    hook = TRLRollouts(lambda: CannedSource(frozenset({(0, 1)})), rows, push_weights=push, verify_tokenizer=False)
    args = GRPOConfig(
        output_dir=str(tiny_model.parent / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=2,
        beta=0.0,
        use_vllm=False,
        dataloader_num_workers=0,
    )
    trainer = Recording(
        model=str(tiny_model),
        reward_funcs=[gym_reward],
        args=args,
        train_dataset=hook.dataset(),
        processing_class=AutoTokenizer.from_pretrained(tiny_model),
        rollout_func=hook,
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    ((path, version),) = pushes
    assert version == 1, "weights pushed once the first step moved them, before the second batch"
    pushed = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    moved = [n for n, p in pushed.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert moved, "the checkpoint holds the weights after step 1, not the initial ones"
    for batch, tensors in zip(hook.batches, captured, strict=True):
        assert [s.reward for s in batch.sequences] == [0.0, None, 2.0, 3.0]
        assert tensors["advantages"][1] == 0.0, "TRL gives the unscored (failed) rollout advantage 0"
        mean, std = 5 / 3, float(np.std([0.0, 2.0, 3.0], ddof=1))
        assert tensors["advantages"][0].item() == pytest.approx((0.0 - mean) / (std + 1e-4), rel=1e-5)
        loss_mask = tensors["completion_mask"] * tensors["tool_mask"]
        assert loss_mask[1].sum() == 0, "and trains none of its tokens"
        assert loss_mask[0].tolist()[:7] == [1, 1, 0, 0, 0, 1, 1]


def test_trl_needs_the_dataset_the_hook_made() -> None:
    hook = TRLRollouts(CannedSource, [{"responses_create_params": {"input": [{"role": "user", "content": "q"}]}}])
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), processing_class=SimpleNamespace(eos_token_id=EOS))
    with pytest.raises(ValueError, match="without a valid `gym_serve_row`.*TRLRollouts.dataset"):
        hook([[{"role": "user", "content": "q"}]], trainer)
    with pytest.raises(ValueError, match="row 1: needs `responses_create_params.input`"):
        TRLRollouts(CannedSource, [{"prompt": "q"}])


def test_trls_async_rollout_samples_are_trls_own_with_advantages_from_the_scored_rollouts() -> None:
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    group = [two_turn(0, 0, 0.0, policy_version=4), failed(two_turn(0, 1, 0), 1), two_turn(0, 2, 1.0)]
    samples = rollout_samples(group, group_id=9, model_version=5)
    assert len(samples) == 2 and all(isinstance(s, RolloutSample) for s in samples), "the failed rollout is dropped"
    first, last = samples
    assert (first.advantage, last.advantage) == pytest.approx((-1.0, 1.0))
    assert (first.model_version, last.model_version) == (4, 5), "the bundle's version, else the requested one"
    assert first.completion_mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1] and first.group_id == 9
    assert first.old_log_probs.dtype == np.float32 and first.old_log_probs[3] == -0.5 and first.input_ids[-1] == EOS
    sent: list[tuple[list[str], int]] = []
    transfer = GymServeWeightTransfer(lambda named, version: sent.append(([n for n, _ in named], version)))
    transfer.init_weight_transfer()
    transfer.send_weights(iter([("w", 1)]))
    transfer.send_weights(iter([("w", 2)]))
    assert sent == [(["w"], 1), (["w"], 2)], "each sync is the next version, as the trainer counts them"


# ---- verl, SkyRL, NeMo RL: the logic (their real packages: tests/test_trainers_vllm.py) -----------------------------


def test_verl_fields_cut_the_response_carry_the_versions_and_refuse_a_long_prompt() -> None:
    fields = agent_loop_fields(two_turn(1, 0, 1.0, policy_version=3), prompt_length=8, response_length=5)
    assert fields["response_ids"] == [10, 11, 20, 21, 22] and fields["response_mask"] == [1, 1, 0, 0, 0], "cut at 5"
    assert (
        fields["reward_score"] == 1.0 and fields["num_turns"] == 1 + 2 + 1 and fields["metrics"]["tool_calls"] == 0.125
    )
    assert fields["extra_fields"]["min_global_steps"] == fields["extra_fields"]["max_global_steps"] == 3
    unversioned = agent_loop_fields(two_turn(1, 0, 1.0), prompt_length=8, response_length=9, fallback_version=6)
    assert unversioned["extra_fields"]["min_global_steps"] == unversioned["extra_fields"]["max_global_steps"] == 6
    message = r"\(task 1, rollout 0\): its prompt has 3 tokens, over the trainer's limit of 2; raise `actor_rollout"
    with pytest.raises(PromptTooLong, match=message):
        agent_loop_fields(two_turn(1, 0, 1.0), prompt_length=2, response_length=9)
    with pytest.raises(RolloutFailed):
        agent_loop_fields(failed(two_turn(1, 0, 0), 0), prompt_length=8, response_length=9)


async def test_skyrl_gets_one_row_per_input_with_failures_as_reward_zero_and_an_empty_mask() -> None:
    from dataclasses import dataclass

    @dataclass
    class TrajectoryID:  # the shape of skyrl/train/generators/base.py's
        instance_id: str
        repetition_id: int

    ids = [TrajectoryID(uid, r) for uid in ("a", "b") for r in range(3)]
    batch = {
        "prompts": [[{"role": "user", "content": t.instance_id}] for t in ids],
        "env_extras": [{} for _ in ids],
        "sampling_params": {"temperature": 1.0, "max_generate_length": 64},
        "trajectory_ids": ids,
    }
    source = CannedSource(fail=frozenset({(1, 2)}))
    out = await GymServeGenerator(lambda: source, eos_token_id=EOS).generate(batch)
    assert out["rewards"] == [0.0, 1.0, 2.0, 0.0, 1.0, 0.0] and out["stop_reasons"][-1] == "error"
    assert out["loss_masks"][5] == [0] and out["loss_masks"][0] == [1, 1, 0, 0, 0, 1, 1]
    assert out["trajectory_ids"] is ids and out["rollout_metrics"]["gym_serve/failed_rollouts"] == 1.0
    assert [n for _, n, _ in source.requests] == [3] and source.requests[0][2]["max_output_tokens"] == 64
    with pytest.raises(PromptTooLong, match="raise `trainer.max_prompt_length`"):
        await GymServeGenerator(CannedSource, eos_token_id=EOS, max_prompt_length=2).generate(batch)


async def collect_like_nemo_rl(rch: GymServeRolloutCollection, examples: list[dict[str, Any]]) -> list[Any]:
    """NeMo RL's loop over `run_examples`: awaitables in completion order, put back in order by `_rowidx`."""
    rows = [{**example, "_rowidx": i} for i, example in enumerate(examples)]
    results: list[Any] = [None] * len(rows)
    for task in rch.run_examples(examples=rows, head_server_config=None):
        row, result = await task
        results[row["_rowidx"]] = result
    return results


async def test_nemo_rl_collects_through_the_stand_in_and_a_failure_raises_where_it_awaits() -> None:
    examples = [{"responses_create_params": {"input": []}, "agent_ref": {"name": "weather"}} for _ in range(4)]
    results = await collect_like_nemo_rl(GymServeRolloutCollection(CannedSource), examples)
    assert [r["_ng_task_index"] for r in results] == [0, 1, 2, 3], "back in input order"
    with pytest.raises(RolloutFailed, match=r"\(task 2, rollout 0\) failed \(model_error\)"):
        failing = frozenset({(2, 0)})
        await collect_like_nemo_rl(GymServeRolloutCollection(lambda: CannedSource(failing)), examples)
    with pytest.raises(PromptTooLong, match="raise `GYM_SERVE_MAX_PROMPT_LENGTH`"):
        await collect_like_nemo_rl(GymServeRolloutCollection(CannedSource, max_prompt_length=2), examples)


async def test_the_in_cluster_source_names_a_row_it_cannot_route() -> None:
    from gym_serve.collect.stream import ServeRollouts
    from gym_serve.errors import InputError

    rows = [{"responses_create_params": {"input": "hi"}, "agent_ref": {"name": "weather"}}, {"input": []}]
    with pytest.raises(InputError, match="line 2, field `responses_create_params`: Field required"):
        [r async for r in ServeRollouts(agents=["weather"]).rollouts(rows)]
    with pytest.raises(InputError, match="line 1, field `agent_ref`: no `agent_ref.name` and no default agent"):
        [r async for r in ServeRollouts(agents=["weather"]).rollouts([{"responses_create_params": {"input": "hi"}}])]
