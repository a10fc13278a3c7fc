"""TRL's asynchronous GRPO (`trl.experimental.async_grpo`): gym-serve as its rollout worker and weight transfer.

    worker = GymServeRolloutWorker(lambda: GymClient(url, token=token), rows, num_generations=8)
    trainer = AsyncGRPOTrainer(model=path, args=AsyncGRPOConfig(...), train_dataset=worker.dataset(),
                               rollout_worker=worker, weight_transfer=GymServeWeightTransfer(push))
    trainer.train()

The contract (trl 1.16, async_grpo_trainer.py and async_rollout_worker.py):
the trainer drains `rollout_buffer`, a queue of `RolloutSample`s: `input_ids`
(the whole sequence), `completion_mask` (1 on tokens to train, over the whole
sequence), `old_log_probs` (the sampler's, aligned to `input_ids`, 0.0 on
context), `advantage`, `model_version` (the trainer drops samples more than
`max_staleness` versions old) and `group_id`. Unlike the synchronous trainer,
here the *worker* computes advantages: `(r - mean) / (std + 1e-8)` over the
group's scored rollouts, population std, as TRL's own worker does
(`gym_serve.trainers.sequence.group_advantages`).

Failed rollouts are dropped (they have no tokens to train on, and TRL's own
worker builds samples only from finished generations); the rest of the group
keeps advantages over the rollouts that finished. A `mask_sample` rollout is
dropped too.

Versions: the trainer syncs weights (`send_weights`, counted from 1 by
`GymServeWeightTransfer`) and then calls `update_model_version`; a sample's
`model_version` is the oldest `policy_version` of its bundles where the tier
reports one, else the version that was live when its group was requested.

TRL's async trainer itself needs CUDA (it forces a FlashAttention-3 kernel
fetched from the Hub), so this adapter is tested against TRL's real
`RolloutSample`, queue dataset and collator, not by a training run.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gym_serve.trainers.sequence import TrainingSequence, build_sequences, failure_class, group_advantages
from gym_serve.trainers.source import SourceFactory, run_groups
from gym_serve.wire.responses import output_text

__all__ = ["GymServeRolloutWorker", "GymServeWeightTransfer", "NamedTensorsPush", "rollout_samples"]

NamedTensorsPush = Callable[[Iterator[tuple[str, Any]], int], None]
"""`push(named_tensors, version)`: put these weights into gym-serve's model tier as `version`."""


def rollout_samples(group: list[dict[str, Any]], *, group_id: int, model_version: int) -> list[Any]:
    """TRL `RolloutSample`s of one group of rollouts (same task): failed and `mask_sample` rollouts dropped.

    A harness rollout of several segments gives one sample per segment, each with the rollout's advantage.
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # chosen knowingly: async GRPO is all experimental
    finished = [r for r in group if failure_class(r) is None]
    built = [(r, build_sequences(r)) for r in finished]
    kept = [(r, segments) for r, segments in built if segments[0].trainable]
    rewards = [segments[0].reward for _, segments in kept]
    advantages = group_advantages(rewards)
    scored = [r for r in rewards if r is not None]
    mean = sum(scored) / len(scored) if scored else float("nan")
    std = (sum((r - mean) ** 2 for r in scored) / len(scored)) ** 0.5 if scored else float("nan")
    now = time.time()
    samples = []
    for (rollout, segments), advantage in zip(kept, advantages, strict=True):
        samples += [_sample(rollout, s, advantage, group_id, model_version, std, now) for s in segments]
    return samples


def _sample(
    rollout: dict[str, Any], s: TrainingSequence, advantage: float, group_id: int, model_version: int, std: float,
    now: float,
) -> Any:  # fmt: skip
    """One sequence as TRL's `RolloutSample`."""
    import numpy as np
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    context = [0] * len(s.prompt_ids)
    return RolloutSample(
        prompt=rollout["responses_create_params"]["input"],
        completion=[{"role": "assistant", "content": output_text(rollout["response"]["output"])}],
        input_ids=np.asarray(s.token_ids, dtype=np.int64),
        completion_mask=np.asarray(context + s.completion_mask, dtype=np.int64),
        old_log_probs=np.asarray([0.0] * len(context) + s.completion_logprobs, dtype=np.float32),
        advantage=float(advantage),
        model_version=s.policy_version_min if s.policy_version_min is not None else model_version,
        group_id=group_id,
        metrics={"reward": float(s.reward if s.reward is not None else float("nan")), "reward_std": std},
        enqueued_at=now,
    )


class GymServeRolloutWorker:
    """TRL's `RolloutWorkerProtocol`, fed by gym-serve: one thread asks for groups and fills `rollout_buffer`.

    Rows are taken in order, round and round; `groups_in_flight` groups are
    asked for at once, so sampling overlaps training as TRL's own worker does.
    """

    def __init__(
        self,
        source: SourceFactory,
        rows: Sequence[dict[str, Any]],
        *,
        num_generations: int,
        groups_in_flight: int = 4,
        max_buffered_samples: int = 1024,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        if not rows:
            raise ValueError("no rows to roll out")
        self.source = source
        self.rows = [dict(row) for row in rows]
        self.num_generations = num_generations
        self.groups_in_flight = groups_in_flight
        self.sampling = {
            k: v
            for k, v in {"temperature": temperature, "top_p": top_p, "max_output_tokens": max_output_tokens}.items()
            if v is not None
        }
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=max_buffered_samples)
        self.metrics_queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.model_version = 0
        self.last_sample_at = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def dataset(self) -> Any:
        """A `train_dataset` for `AsyncGRPOTrainer` (it wants a `prompt` column; the rows come from this worker)."""
        from datasets import Dataset

        return Dataset.from_dict({"prompt": [row["responses_create_params"]["input"] for row in self.rows]})

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gym-serve-rollouts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def update_model_version(self, model_version: int) -> None:
        self.model_version = model_version

    def check_health(self, stale_after_s: float) -> None:
        if self._error is not None:
            raise RuntimeError(f"the gym-serve rollout worker failed: {self._error!r}") from self._error
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the gym-serve rollout worker is not running")
        if time.monotonic() - self.last_sample_at > stale_after_s:
            raise RuntimeError(f"the gym-serve rollout worker produced no sample in {stale_after_s} s")

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as e:  # surfaced to the trainer by check_health
            self._error = e

    async def _produce(self) -> None:
        group_ids = itertools.count()
        rows = itertools.cycle(self.rows)
        async with self.source() as source:

            async def one_group() -> None:
                group_id, row, version = next(group_ids), next(rows), self.model_version
                (group,) = await run_groups(source, [row], [self.num_generations], **self.sampling)
                samples = rollout_samples(group, group_id=group_id, model_version=version)
                failed = sum(failure_class(r) is not None for r in group)
                self.metrics_queue.put({"gym_serve/failed_rollouts": float(failed)})
                for sample in samples:
                    while not self._stop.is_set():
                        try:
                            self.rollout_buffer.put_nowait(sample)
                            break
                        except queue.Full:  # the trainer is behind: wait without blocking the other groups
                            await asyncio.sleep(0.2)
                if samples:
                    self.last_sample_at = time.monotonic()

            running: set[asyncio.Task[None]] = set()
            while not self._stop.is_set():
                while len(running) < self.groups_in_flight:
                    running.add(asyncio.create_task(one_group()))
                done, running = await asyncio.wait(running, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a broken rollout contract stops the worker (check_health reports it)
            for task in running:
                task.cancel()


class GymServeWeightTransfer:
    """TRL's `WeightTransferProtocol`: each `send_weights` pushes the next version into gym-serve's model tier.

    `pause` / `resume` do nothing: gym-serve's tier decides what happens to
    requests in flight during an update, and the samples carry the version
    they were sampled with.
    """

    def __init__(self, push: NamedTensorsPush) -> None:
        self.push = push
        self.version = 0

    def init_weight_transfer(self) -> None:
        return None

    def pause(self) -> None:
        return None

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        self.version += 1
        self.push(iterator, self.version)

    def resume(self) -> None:
        return None

    def destroy(self) -> None:
        return None
