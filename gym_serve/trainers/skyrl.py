"""SkyRL: gym-serve as a generator (`GeneratorInterface.generate`, skyrl 0.4 / skyrl-train 0.3).

    class GymServeExp(BasePPOExp):                      # skyrl.train.entrypoints.main_base
        def get_generator(self, cfg, tokenizer, inference_engine_client):
            return GymServeGenerator(lambda: GymClient(url, token=token), eos_token_id=tokenizer.eos_token_id,
                                     tokenizer=tokenizer, max_prompt_length=cfg.trainer.max_prompt_length)

The contract (skyrl/train/generators/base.py, utils.py, trainer_utils.py):
`generate(input_batch)` gets `prompts` (chat messages), `env_extras` (the
dataset row's other columns), `sampling_params` and `trajectory_ids`
(`instance_id` = the row's uid, `repetition_id` = 0..n-1), each prompt already
repeated `n_samples_per_prompt` times in a row, and returns, in the same order
and count: `prompt_token_ids`, `response_ids`, `rewards` (a scalar per
trajectory, placed on the last response token), `loss_masks` (1 = generated),
`rollout_logprobs` (0.0 on observation tokens), `stop_reasons`,
`rollout_metrics` and `trajectory_ids`. SkyRL's `validate_generator_output`
checks the lengths agree row by row. SkyRL computes advantages itself (by uid).

The row sent to gym-serve is `env_extras[i]["gym_serve_row"]` (a NeMo Gym row)
when the dataset has that column, else one made from the prompt.

A failed rollout (SkyRL's convention: every input needs a row, there is no
failure field) comes back as reward 0.0 with an all-zero loss mask and
`stop_reason: "error"`; its completion is one EOS token on the group's prompt.
Note that SkyRL's group mean counts that 0.0. A rollout cut by the output-token
limit has `stop_reason: "length"` (SkyRL's `apply_overlong_filtering` masks it).

A harness rollout whose history was rewritten has several segments: by default
SkyRL gets its final segment (one row per trajectory, as `generate` promises);
with `step_wise=True` (SkyRL's step-wise training,
`generator.step_wise_trajectories`) it gets one row per segment, the
trajectory's id repeated and `is_last_step` true on its last segment, each row
with the trajectory's reward.

SkyRL needs Python 3.12 (gym-serve tests on 3.11), so this adapter's tests run
in SkyRL's own environment (`scripts/trainer_envs.py`) against SkyRL's real
`GeneratorInterface` and `validate_generator_output`; the output is a plain
dict, as SkyRL's TypedDict is.
"""

from __future__ import annotations

import json
from typing import Any

from gym_serve.trainers.sequence import (
    TrainingSequence,
    build_sequences,
    check_prompt_length,
    check_tokenizer,
    failure_class,
    group_sequences,
)
from gym_serve.trainers.source import SourceFactory, run_groups

__all__ = ["GymServeGenerator", "generator_output"]


def generator_output(
    groups: list[list[dict[str, Any]]],
    *,
    eos_token_id: int,
    trajectory_ids: list[Any] | None = None,
    tokenizer: Any = None,
    max_prompt_length: int | None = None,
    step_wise: bool = False,
) -> dict[str, Any]:
    """SkyRL's `GeneratorOutput` for groups of rollouts (each group the repeats of one prompt, in order).

    With SkyRL's `tokenizer` each rollout's ids are checked to be that tokenizer's, and with
    `max_prompt_length` (SkyRL's `trainer.max_prompt_length`) each prompt's length. With `step_wise`, one row per
    segment of each rollout (see the module docstring).
    """
    sequences: list[TrainingSequence] = []
    stop_reasons: list[str] = []
    ids: list[Any] = []
    last_steps: list[bool] = []
    position = 0  # the rollout's place in the input batch
    for group in groups:
        built = group_sequences(group, eos_token_id)
        for rollout, s in zip(group, built, strict=True):
            position += 1
            failed = failure_class(rollout) is not None
            if not failed and tokenizer is not None:
                check_tokenizer(rollout, tokenizer, trainer="SkyRL")
            if not failed and max_prompt_length is not None:
                check_prompt_length(s, max_prompt_length, setting="trainer.max_prompt_length")
            steps = build_sequences(rollout) if step_wise and not failed else [s]
            stop = "error" if failed else ("length" if rollout.get("truncated") else "stop")
            sequences += steps
            stop_reasons += [stop] * len(steps)
            if trajectory_ids is not None:
                ids += [trajectory_ids[position - 1]] * len(steps)
            last_steps += [k == len(steps) - 1 for k in range(len(steps))]
    trained = [s for s in sequences if s.trainable]
    extra: dict[str, Any] = {"is_last_step": last_steps} if step_wise else {}
    return {
        "prompt_token_ids": [s.prompt_ids for s in sequences],
        "response_ids": [s.completion_ids for s in sequences],
        "rewards": [s.reward if s.reward is not None else 0.0 for s in sequences],
        "loss_masks": [s.completion_mask for s in sequences],
        "stop_reasons": stop_reasons,
        "rollout_metrics": {
            "gym_serve/failed_rollouts": float(stop_reasons.count("error")),
            "gym_serve/mean_reward": sum(s.reward or 0.0 for s in trained) / len(trained) if trained else 0.0,
        },
        "rollout_logprobs": [s.completion_logprobs for s in sequences],
        "trajectory_ids": ids if step_wise and trajectory_ids is not None else trajectory_ids,
        **extra,
    }


class GymServeGenerator:
    """A SkyRL generator whose trajectories gym-serve runs (it does not use SkyRL's inference engines)."""

    def __init__(
        self,
        source: SourceFactory,
        *,
        eos_token_id: int,
        default_agent: str | None = None,
        tokenizer: Any = None,
        max_prompt_length: int | None = None,
        step_wise: bool = False,
    ) -> None:
        self.source = source
        self.eos_token_id = eos_token_id
        self.default_agent = default_agent
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.step_wise = step_wise

    async def generate(self, input_batch: dict[str, Any]) -> dict[str, Any]:
        prompts = input_batch["prompts"]
        extras = input_batch.get("env_extras") or [{} for _ in prompts]
        ids = input_batch.get("trajectory_ids")
        rows = [self._row(prompt, extra or {}) for prompt, extra in zip(prompts, extras, strict=True)]
        keys = [t.instance_id for t in ids] if ids else [json.dumps(row, sort_keys=True, default=str) for row in rows]
        starts = [i for i in range(len(rows)) if i == 0 or keys[i] != keys[i - 1]]
        counts = [end - start for start, end in zip(starts, [*starts[1:], len(rows)], strict=True)]
        params = input_batch.get("sampling_params") or {}
        sampling = {k: params[k] for k in ("temperature", "top_p") if params.get(k) is not None}
        if params.get("max_generate_length") is not None:
            sampling["max_output_tokens"] = params["max_generate_length"]
        async with self.source() as source:
            groups = await run_groups(source, [rows[i] for i in starts], counts, **sampling)
        return generator_output(
            groups,
            eos_token_id=self.eos_token_id,
            trajectory_ids=ids,
            tokenizer=self.tokenizer,
            max_prompt_length=self.max_prompt_length,
            step_wise=self.step_wise,
        )

    def _row(self, prompt: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
        row = dict(extra.get("gym_serve_row") or {"responses_create_params": {"input": list(prompt)}})
        if self.default_agent is not None and not (row.get("agent_ref") or {}).get("name"):
            row["agent_ref"] = {"name": self.default_agent}
        return row
