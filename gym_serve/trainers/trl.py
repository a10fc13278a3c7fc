"""TRL: gym-serve as `GRPOTrainer`'s `rollout_func` (trl>=1.0).

    rollouts = TRLRollouts(lambda: GymClient(url, token=token), rows, push_weights=push)
    trainer = GRPOTrainer(model=path, args=GRPOConfig(..., use_vllm=False), train_dataset=rollouts.dataset(),
                          processing_class=tokenizer, reward_funcs=[gym_reward], rollout_func=rollouts)
    trainer.train()

The contract (trl/trainer/grpo_trainer.py, 1.0 to 1.16): TRL calls
`rollout_func(prompts, trainer)` once per generation batch with this process's
slice of the prompt column, each prompt already repeated `num_generations`
times in a row, and wants one completion per element, in order:
`prompt_ids`, `completion_ids`, `logprobs`, and `env_mask` (1 = a token the
policy sampled, trained; 0 = tool output, user turn, markup). Every other key
reaches the reward functions as a keyword argument; gym-serve's reward rides
along as `gym_reward`, which `gym_reward` (the reward function) hands back.
TRL normalises rewards within groups itself.

Rows: TRL passes only the prompt column, so `dataset()` puts each gym-serve
row's messages there with the row's position as an extra key of the first
message (`gym_serve_row`), and the adapter sends that row, whole, to gym-serve.

Failed rollouts (TRL's convention for an unscorable completion): the row
comes back masked, with reward None. TRL excludes a None reward from its
group's mean and std and gives it advantage 0; its completion is one EOS token
with `env_mask` 0, so no token of it is trained. gym-serve has already retried
what was worth retrying. A batch in which every rollout failed raises.

Weights: before asking for a generation batch, when `trainer.state.global_step`
moved since the last push, `push_weights(model, global_step)` puts the new
weights into gym-serve's model tier (TRL does the same for its own vLLM, see
`_last_loaded_step`). `global_step` is the policy version: rollouts sampled
after a push carry it in their bundles' `policy_version` where the tier
reports versions, and it reaches the reward functions as `policy_version`.
`ingress_push(root, client)` is the push for a tier behind gym-serve's ingress:
a safetensors folder per version, then `POST /v1/weights`.
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym_serve.trainers.sequence import (
    TrainingSequence,
    check_prompt_length,
    check_tokenizer,
    failure_class,
    group_sequences,
)
from gym_serve.trainers.source import SourceFactory, run_groups_sync

if TYPE_CHECKING:
    from gym_serve.client import GymClient

__all__ = ["ROW_KEY", "TRLBatch", "TRLRollouts", "WeightPush", "checkpoint_push", "gym_reward", "ingress_push"]

ROW_KEY = "gym_serve_row"
"""The extra key of a prompt's first message that names its gym-serve row."""

WeightPush = Callable[[Any, int], None]
"""`push(model, version)`: put the trainer's current weights into gym-serve's model tier as `version`."""


def checkpoint_push(root: str | Path, publish: Callable[[Path, int], None]) -> WeightPush:
    """A `WeightPush` through a checkpoint folder: `root/policy-v<version>` (safetensors), then `publish(path, v)`.

    The folder is the source any model tier can load from a shared disk;
    `publish` tells gym-serve's tier to load it as that version.
    """

    def push(model: Any, version: int) -> None:
        path = Path(root) / f"policy-v{version}"
        model.save_pretrained(path, safe_serialization=True)
        publish(path, version)

    return push


def ingress_push(root: str | Path, client: Callable[[], GymClient]) -> WeightPush:
    """A `WeightPush` into the model tier behind gym-serve's ingress: `checkpoint_push` publishing with
    `POST /v1/weights` (the ingress needs its bearer token; `root` must be readable by every Model replica)."""

    async def publish(path: Path, version: int) -> None:
        async with client() as gym:
            await gym.push_weights(version, str(path))

    return checkpoint_push(root, lambda path, version: asyncio.run(publish(path, version)))


@dataclass
class TRLBatch:
    """What one `rollout_func` call asked for and handed TRL (kept for logs and checks)."""

    step: int
    rollouts: list[dict[str, Any]]
    sequences: list[TrainingSequence]


class TRLRollouts:
    """A `rollout_func` for TRL's `GRPOTrainer` that samples every completion with gym-serve."""

    def __init__(
        self,
        source: SourceFactory,
        rows: Sequence[dict[str, Any]],
        *,
        push_weights: WeightPush | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        max_prompt_length: int | None = None,
        verify_tokenizer: bool = True,
        keep_batches: int = 8,
    ) -> None:
        for line, row in enumerate(rows, start=1):
            if not isinstance((row.get("responses_create_params") or {}).get("input"), list):
                raise ValueError(f"row {line}: needs `responses_create_params.input` as a list of messages")
        self.source = source
        self.rows = [dict(row) for row in rows]
        self.push_weights = push_weights
        self.sampling = {
            k: v
            for k, v in {"temperature": temperature, "top_p": top_p, "max_output_tokens": max_output_tokens}.items()
            if v is not None
        }
        self.max_prompt_length = max_prompt_length
        """Refuse a rollout whose prompt is longer (TRL >= 1.0 has no prompt limit of its own to read)."""
        self.verify_tokenizer = verify_tokenizer
        """Check each rollout's ids against TRL's `processing_class` (`check_tokenizer`); off only for made-up ids."""
        self.pushed_step = 0
        """The step whose weights gym-serve serves; the tier starts on the trainer's initial weights (step 0)."""
        self.batches: collections.deque[TRLBatch] = collections.deque(maxlen=keep_batches)
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # chosen knowingly: `rollout_func` is experimental

    def dataset(self) -> Any:
        """The `train_dataset` for `GRPOTrainer`: one `prompt` per row, tagged with the row's position."""
        from datasets import Dataset

        prompts = []
        for index, row in enumerate(self.rows):
            first, *rest = row["responses_create_params"]["input"]
            prompts.append([{**first, ROW_KEY: index}, *rest])
        return Dataset.from_dict({"prompt": prompts})

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step = int(trainer.state.global_step)
        if self.push_weights is not None and step != self.pushed_step:
            if trainer.accelerator.is_main_process:
                self.push_weights(trainer.accelerator.unwrap_model(trainer.model), step)
            trainer.accelerator.wait_for_everyone()
            self.pushed_step = step
        runs = _runs([self._row_index(messages) for messages in prompts])
        groups = run_groups_sync(
            self.source, [self.rows[index] for index, _ in runs], [count for _, count in runs], **self.sampling
        )
        rollouts = [rollout for group in groups for rollout in group]
        eos = _eos_id(trainer.processing_class)
        sequences = [s for group in groups for s in group_sequences(group, eos)]
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        for rollout, s in zip(rollouts, sequences, strict=True):
            if failure_class(rollout) is None and self.verify_tokenizer:
                check_tokenizer(rollout, tokenizer, trainer="TRL")
            if failure_class(rollout) is None and self.max_prompt_length is not None:
                check_prompt_length(s, self.max_prompt_length, setting="max_prompt_length")
        if not any(s.trainable for s in sequences):
            raise RuntimeError(f"step {step}: every rollout of the batch failed, e.g. {rollouts[0].get('error')!r}")
        self.batches.append(TRLBatch(step, rollouts, sequences))
        return {
            "prompt_ids": [s.prompt_ids for s in sequences],
            "completion_ids": [s.completion_ids for s in sequences],
            "logprobs": [s.completion_logprobs for s in sequences],
            "env_mask": [s.completion_mask for s in sequences],
            "gym_reward": [s.reward for s in sequences],
            "policy_version": [s.policy_version_min for s in sequences],
            "gym_failure": [s.failure for s in sequences],
        }

    def _row_index(self, messages: Any) -> int:
        index = messages[0].get(ROW_KEY) if isinstance(messages, list) and messages else None
        if not isinstance(index, int) or not 0 <= index < len(self.rows):
            raise ValueError(
                f"a prompt without a valid `{ROW_KEY}` key on its first message ({index!r}): build the "
                f"train_dataset with TRLRollouts.dataset(), so every prompt names its gym-serve row"
            )
        return index


def gym_reward(prompts: list[Any], completions: list[Any], gym_reward: list[float | None], **_: Any) -> list[Any]:
    """The reward function that hands TRL gym-serve's rewards (None for a failed rollout: unscorable)."""
    return list(gym_reward)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Consecutive equal row indices as (index, count): TRL's groups of `num_generations` repeats."""
    runs: list[tuple[int, int]] = []
    for index in indices:
        if runs and runs[-1][0] == index:
            runs[-1] = (index, runs[-1][1] + 1)
        else:
            runs.append((index, 1))
    return runs


def _eos_id(processing_class: Any) -> int:
    tokenizer = getattr(processing_class, "tokenizer", processing_class)  # a processor wraps its tokenizer
    eos = tokenizer.eos_token_id
    if not isinstance(eos, int):
        raise ValueError("the trainer's processing_class has no eos_token_id (needed to mask a failed rollout)")
    return eos
