"""A fully-async GRPO loop: generation never drains for a weight update; unfinished rollouts pause and go on.

The synchronous loop (`examples/grpo_trainer.py`) waits, every step, for the last rollout of its batch: the
long tail sets the step time, and anything still running when the weights change is either waited for or
thrown away. This loop keeps rollouts running ahead of the trainer and, at each update, hands the unfinished
ones to gym-serve to keep rather than to lose:

1. it asks for `tasks_per_step` more tasks than it trains on (`group_size` rollouts each), with
   `max_policy_lag: 1` (no token more than one version behind);
2. as soon as `tasks_per_step` groups have finished it pauses the batch (`ClientBatch.pause`): every rollout
   stops at its next turn boundary (a model call in flight finishes first), and comes back as a *partial*
   (`partial: true`: its tokens so far, their policy versions, a digest of its history);
3. it trains on the finished groups (the same clipped step as the synchronous loop; the sampler's log-prob of
   every token is that of the version that sampled it, `policy_version_spans`) and pushes the weights as
   the next version;
4. the next batch continues the partials under the new policy, beside the next step's new tasks; finished
   members of a group wait in the trainer until the group is whole.

At the end it continues what is left to its end and checks that every rollout it asked for was delivered
exactly once, and that no token it trained on was more than one version old. One JSON line per step.

    export GYM_SERVE_TOKEN=...
    serve run deployments/grpo_vllm.yaml
    python -m examples.async_trainer --url http://127.0.0.1:8000 --model /tmp/gym-serve-tiny-model --steps 2
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from examples.grpo_trainer import GRPOConfig, GRPOTrainer, build_sequence, group_advantages, parse_config
from gym_serve.client import ClientBatch, GymClient

__all__ = ["AsyncConfig", "AsyncStepLog", "AsyncTrainer", "main"]


class AsyncConfig(GRPOConfig):
    ahead: int = Field(default=1, ge=0, description="Tasks asked for beyond the `tasks_per_step` trained on.")


class AsyncStepLog(BaseModel):
    step: int
    policy_version: int = Field(description="The version the step's weights were pushed as.")
    sampled_by: list[int] = Field(description="The versions that sampled the tokens trained on.")
    mean_reward: float
    sequences: int
    continued: int = Field(description="Trained rollouts that had been paused as partials and continued.")
    paused: int = Field(description="Rollouts paused at this step's update (continued by the next batch).")
    seconds: float


class LostRollout(RuntimeError):
    """Raised when a rollout asked for never came back (nor as a failure row)."""


class AsyncTrainer(GRPOTrainer):
    """`GRPOTrainer`'s policy, update and push; the loop above instead of a synchronous batch per step."""

    config: AsyncConfig

    def __init__(self, config: AsyncConfig) -> None:
        super().__init__(config)
        self.next_task = 0
        self.groups: dict[int, list[dict[str, Any]]] = {}
        """Finished (or failed) members of each group, by task, until the group is whole."""
        self.partials: list[dict[str, Any]] = []
        self.asked = self.delivered = 0
        self.was_partial: set[tuple[int, int]] = set()
        self.async_history: list[AsyncStepLog] = []

    async def run(self) -> list[AsyncStepLog]:  # type: ignore[override]
        async with GymClient(self.config.url, token=os.environ.get(self.config.token_env)) as client:
            await self.push(client, (await client.weights())["version"] + 1)
            for step in range(1, self.config.steps + 1):
                self.async_history.append(await self.async_step(client, step))
            await self.consume(self.batch(client, 0), pause_at=None)  # what is left, to its end
        if self.delivered != self.asked or self.partials:
            raise LostRollout(f"asked for {self.asked} rollouts, {self.delivered} came back")
        return self.async_history

    def batch(self, client: GymClient, tasks: int) -> ClientBatch:
        """New tasks (numbered across steps, so a group is one task for the whole run) and the partials."""
        rows = []
        for _ in range(tasks):
            row = self.rows[self.next_task % len(self.rows)]
            rows.append({**row, "_ng_task_index": self.next_task, "agent_ref": {"name": self.config.env}})
            self.next_task += 1
        self.asked += tasks * self.config.group_size
        partials, self.partials = self.partials, []
        return client.rollouts(
            rows,
            partials=partials,
            num_repeats=self.config.group_size,
            max_policy_lag=1,
            temperature=self.config.temperature,
            max_output_tokens=self.config.max_output_tokens,
        )

    async def consume(self, batch: ClientBatch, pause_at: int | None) -> int:
        """Read the batch; pause it once `pause_at` groups are whole. Returns the rollouts paused."""
        paused = 0
        async for row in batch:
            if row.get("partial"):
                self.partials.append(row)
                self.was_partial.add(key(row))
                paused += 1
                continue
            self.delivered += 1
            self.groups.setdefault(int(row["_ng_task_index"]), []).append(row)
            if pause_at is not None and not batch.paused and len(self.whole()) >= pause_at:
                await batch.pause()
        return paused

    def whole(self) -> list[int]:
        return [task for task, members in self.groups.items() if len(members) == self.config.group_size]

    async def async_step(self, client: GymClient, step: int) -> AsyncStepLog:
        started = time.perf_counter()
        paused = await self.consume(
            self.batch(client, self.config.tasks_per_step + self.config.ahead), pause_at=self.config.tasks_per_step
        )
        rows = [r for task in self.whole() for r in self.groups.pop(task) if "_ng_failure_class" not in r]
        sampled_by = sorted({v for r in rows for v in (r["policy_version_min"], r["policy_version_max"])})
        if sampled_by and sampled_by[0] < self.version - 1:
            raise RuntimeError(f"step {step}: tokens of version {sampled_by[0]} with max_policy_lag 1")
        sequences = [build_sequence(r) for r in rows]
        if sequences:
            self._update(sequences, group_advantages([s.reward for s in sequences], [s.group for s in sequences]))
        await self.push(client, self.version + 1)
        return AsyncStepLog(
            step=step,
            policy_version=self.version,
            sampled_by=sampled_by,
            mean_reward=sum(s.reward for s in sequences) / max(len(sequences), 1),
            sequences=len(sequences),
            continued=sum(1 for r in rows if key(r) in self.was_partial),
            paused=paused,
            seconds=time.perf_counter() - started,
        )


def key(row: dict[str, Any]) -> tuple[int, int]:
    return int(row["_ng_task_index"]), int(row["_ng_rollout_index"])


def main(argv: Sequence[str] | None = None) -> AsyncTrainer:
    trainer = AsyncTrainer(parse_config(AsyncConfig, argv, __doc__))
    for log in asyncio.run(trainer.run()):
        print(log.model_dump_json(), flush=True)
    return trainer


if __name__ == "__main__":
    main(sys.argv[1:])
