"""A small GRPO loop on CPU that trains on rollouts from the gym-serve HTTP ingress and syncs its weights back.

Each step:

1. asks the ingress (`POST /v1/rollouts`, through `gym_serve.client`: HTTP
   only, no Ray in this process) for `group_size` rollouts of each of
   `tasks_per_step` rows, sampled by the vLLM deployment, and checks that every
   token of them came from the policy version it last pushed
   (`policy_version_min` / `policy_version_max` on each rollout row);
2. turns every rollout into one training sequence from the token ids on each
   model call's last output item (`prompt_token_ids`, `generation_token_ids`,
   `generation_log_probs`): the last call's prompt + generation is the whole
   episode, the generated spans of all calls are trained, everything else
   (the prompt, and between turns the tool outputs, user turns and template
   markup) is masked. Contiguity is asserted first, as NeMo RL does
   ("Non-contiguous messages found!"), with `gym_serve.check_contiguity`;
3. computes group-normalised advantages: `(r - mean(group)) / (std(group) + eps)`;
4. recomputes the log-probs of the sampled tokens with transformers and takes
   one clipped-surrogate policy-gradient step (token-level mean, PPO clip; with
   one update per step the ratio is 1 and this is plain REINFORCE with a group
   baseline);
5. writes its weights as a safetensors checkpoint and pushes them to every
   replica of the vLLM tier as the next policy version (`POST /v1/weights`),
   which answers once every replica serves them: the next step samples from
   the policy it just trained;
6. logs mean reward, sequences, trained/masked tokens, loss, the update's norm,
   the max and mean |logprob_trainer - logprob_sampler| over the trained
   tokens (measured before the update), and the seconds the push took.

Before the first step it pushes its starting weights, so the tier serves
exactly what it trains. With `--no-sync-weights` it pushes nothing after that:
the tier keeps sampling from the starting weights while the trainer's copy moves
on, which is what the loop did before weight sync existed.

Run it against a Serve config (both sides on one machine, or sharing the
checkpoint folder):

    python -m gym_serve.models.tiny_model /tmp/gym-serve-tiny-model
    export GYM_SERVE_TOKEN=...                  # weight pushes need a bearer token
    serve run deployments/grpo_vllm.yaml        # the ingress + the `starts_with` environment on vLLM
    python examples/grpo_trainer.py --url http://127.0.0.1:8000 --model /tmp/gym-serve-tiny-model --steps 20

The task. The tiny model has random weights and never solves a real task, so
the example trains on `examples/starts_with_env.py`: reward 1 when the reply
starts with "Yo", which the tiny model does about one time in six at first.
With weight sync the mean reward climbs to 0.8 and more within about ten
steps at the default learning rate; without it, it stays where it started
(`benchmarks/grpo_learning.py` measures both and plots them).

Log-prob agreement. vLLM reports the log-prob of each sampled token under the
served weights (raw logits, before temperature), so when the trainer's weights
are the served ones the difference is numerical noise (fp32: under 1e-4): it
is the check that the ids, their alignment and the weights all match, and with
weight sync it holds at every step. Without sync it grows with every step: the
rollouts are stale. Under `tool_choice: required` the engine samples from a
grammar-masked distribution and reports its log-probs, which a plain forward
pass does not reproduce.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from gym_serve.client import GymClient
from gym_serve.wire.tokens import TOKEN_FIELDS, check_contiguity, token_calls

__all__ = [
    "GRPOConfig",
    "GRPOTrainer",
    "NonContiguousRollout",
    "StaleRollout",
    "StepLog",
    "TrainingSequence",
    "build_sequence",
    "group_advantages",
    "main",
    "parse_config",
]

ROWS = Path(__file__).parent / "data" / "starts_with.jsonl"


class GRPOConfig(BaseModel):
    """Where the rollouts come from, which weights to train, and the loop's knobs."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The ingress, e.g. http://127.0.0.1:8000.")
    model: Path = Field(description="The folder of the weights the vLLM deployment serves (config + safetensors).")
    env: str = Field(default="starts_with", description="The agent application rows go to (`agent_ref.name`).")
    steps: int = Field(default=20, ge=1)
    rows: Path = Field(default=ROWS, description="Input rows (JSONL); each step takes the next `tasks_per_step`.")
    tasks_per_step: int = Field(default=4, ge=1)
    group_size: int = Field(default=8, ge=2, description="Rollouts per task: the group advantages are relative to.")
    max_output_tokens: int = Field(default=4, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    lr: float = Field(default=1e-5, gt=0)
    clip: float = Field(default=0.2, gt=0, description="PPO clip range of the ratio.")
    updates_per_step: int = Field(default=1, ge=1, description="Gradient steps on each step's rollouts.")
    token_env: str = Field(default="GYM_SERVE_TOKEN", description="Environment variable with the bearer token.")
    sync_weights: bool = Field(default=True, description="Push the weights to the vLLM tier after every step.")
    checkpoints: Path = Field(
        default=Path(tempfile.gettempdir()) / "gym-serve-grpo",
        description="Where the pushed checkpoints go (every replica reads them; the latest stays).",
    )


C = TypeVar("C", bound=GRPOConfig)


class StepLog(BaseModel):
    """What one training step saw and did."""

    step: int
    policy_version: int = Field(description="The policy version that sampled every token of this step's rollouts.")
    mean_reward: float
    rollouts: int
    failed: int
    groups_with_signal: int = Field(description="Groups whose rewards differ (the others have zero advantage).")
    sequences: int
    trained_tokens: int
    masked_tokens: int
    loss: float = Field(
        description="The first update's loss. At ratio 1 it is minus the token-mean advantage: "
        "about 0 when replies are equally long, as a group's advantages sum to 0."
    )
    logprob_diff_max: float = Field(description="max |logprob_trainer - logprob_sampler| before the update.")
    logprob_diff_mean: float
    update_norm: float = Field(description="L2 norm of the parameter change the step made.")
    sync_seconds: float = Field(description="The push of the step's weights to every replica (0 without sync).")
    seconds: float


class StaleRollout(ValueError):
    """Raised when a rollout was sampled by another policy version than the one the trainer pushed."""


class NonContiguousRollout(ValueError):
    """Raised when a rollout's token ids break the contract (each call must extend the one before)."""

    def __init__(self, rollout: dict[str, Any], problems: list[str]) -> None:
        key = (rollout.get("_ng_task_index"), rollout.get("_ng_rollout_index"))
        super().__init__(f"rollout {key}: Non-contiguous messages found! {'; '.join(problems)}")
        self.problems = problems


@dataclass
class TrainingSequence:
    """One rollout as the trainer sees it: the whole episode's ids, which of them to train, and the sampler's view."""

    token_ids: list[int]
    loss_mask: list[bool]
    """True where the policy sampled the token (trained); False for prompt, tool outputs, user turns, markup."""
    sampler_logprobs: list[float]
    """The sampler's log-prob of each trained token (0.0 where masked)."""
    reward: float
    group: Any
    calls: int


def build_sequence(rollout: dict[str, Any]) -> TrainingSequence:
    """The training sequence of a rollout row, after checking its token contract."""
    report = check_contiguity(rollout)
    if not report.ok:
        raise NonContiguousRollout(rollout, report.problems)
    calls = token_calls(rollout["response"]["output"])
    prompt, generation, _ = (calls[-1][field] for field in TOKEN_FIELDS)
    token_ids = [*prompt, *generation]
    mask = [False] * len(token_ids)
    logprobs = [0.0] * len(token_ids)
    for call in calls:
        start = len(call["prompt_token_ids"])
        for offset, logprob in enumerate(call["generation_log_probs"]):
            mask[start + offset] = True
            logprobs[start + offset] = float(logprob)
    return TrainingSequence(token_ids, mask, logprobs, float(rollout["reward"]), rollout["_ng_task_index"], len(calls))


def group_advantages(rewards: Sequence[float], groups: Sequence[Any], eps: float = 1e-6) -> list[float]:
    """GRPO's advantages: each reward relative to its group's mean, in units of the group's standard deviation."""
    members: dict[Any, list[float]] = defaultdict(list)
    for reward, group in zip(rewards, groups, strict=True):
        members[group].append(reward)
    stats = {}
    for group, values in members.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        stats[group] = (mean, std)
    return [
        (r - stats[g][0]) / (stats[g][1] + eps) if stats[g][1] > 0 else 0.0
        for r, g in zip(rewards, groups, strict=True)
    ]


class GRPOTrainer:
    """The policy (a transformers model loaded from the served weights), its optimizer, and the loop."""

    def __init__(self, config: GRPOConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.config = config
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(config.model, torch_dtype=torch.float32)
        self.model.train()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)  # no weight decay: no drift
        self.rows = [json.loads(line) for line in config.rows.read_text().splitlines() if line.strip()]
        if not self.rows:
            raise ValueError(f"{config.rows}: no rows")
        self.history: list[StepLog] = []
        self.version = 0
        """The policy version the tier serves: the trainer's weights as of its last push."""

    async def run(self) -> list[StepLog]:
        async with GymClient(self.config.url, token=os.environ.get(self.config.token_env)) as client:
            current = await client.weights()
            await self.push(client, current["version"] + 1)  # the tier serves exactly what is trained
            for step in range(1, self.config.steps + 1):
                self.history.append(await self.step(client, step))
        return self.history

    async def push(self, client: GymClient, version: int) -> float:
        """Write the weights as a checkpoint and make them policy `version` on every replica; returns seconds."""
        from safetensors.torch import save_file

        started = time.perf_counter()
        folder = self.config.checkpoints / f"version-{version}"
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: t.detach().contiguous() for name, t in self.model.state_dict().items()}
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        await client.push_weights(version, str(folder))
        previous, self.version = self.version, version
        shutil.rmtree(self.config.checkpoints / f"version-{previous}", ignore_errors=True)  # the tier left it
        return time.perf_counter() - started

    async def step(self, client: GymClient, step: int) -> StepLog:
        started = time.perf_counter()
        n = self.config.tasks_per_step
        rows = [
            {**self.rows[((step - 1) * n + i) % len(self.rows)], "agent_ref": {"name": self.config.env}}
            for i in range(n)
        ]
        results = [
            r
            async for r in client.rollouts(
                rows,
                num_repeats=self.config.group_size,
                group_size=self.config.group_size,
                temperature=self.config.temperature,
                max_output_tokens=self.config.max_output_tokens,
            )
        ]
        finished = [r for r in results if "_ng_failure_class" not in r]
        if not finished:
            raise RuntimeError(f"step {step}: every rollout failed, e.g. {results[0].get('error')!r}")
        for r in finished:
            sampled_by = {r.get("policy_version_min"), r.get("policy_version_max")}
            if sampled_by != {self.version}:
                raise StaleRollout(f"step {step}: rollout sampled by policy versions {sampled_by}, not {self.version}")
        sequences = [build_sequence(r) for r in finished]
        advantages = group_advantages([s.reward for s in sequences], [s.group for s in sequences])
        loss, diffs, update_norm = self._update(sequences, advantages)
        trained = sum(sum(s.loss_mask) for s in sequences)
        signal = {s.group for s, a in zip(sequences, advantages, strict=True) if a != 0.0}
        sampled_by = self.version
        sync_seconds = await self.push(client, self.version + 1) if self.config.sync_weights else 0.0
        return StepLog(
            step=step,
            policy_version=sampled_by,
            mean_reward=sum(s.reward for s in sequences) / len(sequences),
            rollouts=len(results),
            failed=len(results) - len(finished),
            groups_with_signal=len(signal),
            sequences=len(sequences),
            trained_tokens=trained,
            masked_tokens=sum(len(s.token_ids) for s in sequences) - trained,
            loss=loss,
            logprob_diff_max=max(diffs),
            logprob_diff_mean=sum(diffs) / len(diffs),
            update_norm=update_norm,
            sync_seconds=sync_seconds,
            seconds=time.perf_counter() - started,
        )

    def _update(self, sequences: list[TrainingSequence], advantages: list[float]) -> tuple[float, list[float], float]:
        """Clipped-surrogate steps; returns the first loss, the pre-update |Δlogprob| per token, and ‖Δθ‖."""
        torch = self.torch
        width = max(len(s.token_ids) for s in sequences)
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        attention = torch.zeros(len(sequences), width, dtype=torch.long)
        mask = torch.zeros(len(sequences), width, dtype=torch.bool)
        sampler = torch.zeros(len(sequences), width)
        for i, s in enumerate(sequences):  # right padding: positions stay those the sampler used
            ids[i, : len(s.token_ids)] = torch.tensor(s.token_ids)
            attention[i, : len(s.token_ids)] = 1
            mask[i, : len(s.token_ids)] = torch.tensor(s.loss_mask)
            sampler[i, : len(s.token_ids)] = torch.tensor(s.sampler_logprobs)
        advantage = torch.tensor(advantages)[:, None]
        before = [p.detach().clone() for p in self.model.parameters()]
        old = None
        first_loss = math.nan
        diffs: list[float] = []
        for update in range(self.config.updates_per_step):
            logprobs = self._logprobs(ids, attention)
            if old is None:
                old = logprobs.detach()
                diffs = (old - sampler)[mask].abs().tolist()
            ratio = torch.exp(logprobs - old)
            surrogate = torch.minimum(
                ratio * advantage, torch.clamp(ratio, 1 - self.config.clip, 1 + self.config.clip) * advantage
            )
            loss = -(surrogate * mask).sum() / mask.sum()
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            if update == 0:
                first_loss = float(loss.detach())
        params = zip(self.model.parameters(), before, strict=True)
        change = sum(float((p.detach() - b).pow(2).sum()) for p, b in params)
        return first_loss, diffs, math.sqrt(change)

    def _logprobs(self, ids: Any, attention: Any) -> Any:
        """log p(token t | tokens < t) for every position (0 at position 0, which nothing predicts)."""
        torch = self.torch
        logits = self.model(input_ids=ids, attention_mask=attention).logits.float()
        picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        return torch.nn.functional.pad(picked, (1, 0))


def main(argv: Sequence[str] | None = None) -> GRPOTrainer:
    """Parse the command line, train, print one JSON line per step; returns the trainer (its model, its history)."""
    trainer = GRPOTrainer(parse_config(GRPOConfig, argv, __doc__))
    for log in asyncio.run(trainer.run()):
        print(log.model_dump_json(), flush=True)
    return trainer


def parse_config(config: type[C], argv: Sequence[str] | None, doc: str | None) -> C:
    """`config` from the command line: a flag per field (`--tasks-per-step 4`, `--no-sync-weights`)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    fields = config.model_fields
    for name, info in fields.items():
        flag = "--" + name.replace("_", "-")
        if info.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=info.description)
        elif info.is_required():
            parser.add_argument(flag, required=True, help=info.description)
        else:
            parser.add_argument(flag, default=None, help=f"{info.description or ''} (default: {info.default})")
    args = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    return config.model_validate(args)


if __name__ == "__main__":
    main(sys.argv[1:])
