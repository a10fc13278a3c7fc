"""The file door: a collection of an input file, run by the rollout driver, a Ray actor.

It reads input rows lazily and expands them with the dispatcher (`gym_serve.collect.materialize`), writes each
rollout row to `<out>_materialized_inputs.jsonl` before dispatching it, runs it through the dispatcher
(`gym_serve.collect.dispatch`: the in-flight window, retries, failure rows, the staleness bound), and appends
every finished rollout to the output at once. Memory is bounded by the in-flight window, not by the input's
size.

Nothing is dropped: a bad row is written to `<out>_failures.jsonl` as `bad_input` with its line; a rollout
that cannot finish is written there as a failure row. Every turn a rollout completes is journaled in
`<out>_journal.jsonl` (`gym_serve.collect.journal`). `resume` continues from the files on disk
(`gym_serve.collect.resume`) without running a finished key again, and an unfinished rollout goes on from
its last journaled turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import ray

from gym_serve.calls import tracing
from gym_serve.collect.attempts import Outcome, failure_row
from gym_serve.collect.dispatch import Dispatcher, Send
from gym_serve.collect.job import (
    CollectJob,
    CollectSummary,
    Key,
    failures_path,
    journal_path,
    rollout_key,
    sibling_path,
)
from gym_serve.collect.journal import Journal, JournalWriter, load_journal
from gym_serve.collect.materialize import materialize
from gym_serve.collect.resume import Progress, load_progress
from gym_serve.collect.staleness import Staleness
from gym_serve.errors import FailureKind, InputError
from gym_serve.wire.jsonl import JsonlWriter

__all__ = ["Collection", "RolloutDriver", "driver_on", "follow", "write_ordered"]

_LATENCY_SAMPLES = 10_000
_SKIPPED_SHOWN = 20


class Collection:
    """One collection's run: the file, resume, bookkeeping. The actor below hosts it; tests may too.

    `send` runs one rollout on an agent (default: the deployed agent applications, through Serve).
    """

    def __init__(
        self, job: CollectJob, send: Send | None = None, *, seed: int = 0, staleness: Staleness | None = None
    ) -> None:
        self.job = job
        if staleness is None and job.max_policy_lag is not None:
            staleness = Staleness(job.max_policy_lag, flag_stale=job.flag_stale)
        self.dispatcher = Dispatcher(
            job.agents,
            default_agent=job.default_agent,
            policy=job.retry_policy(),
            max_in_flight=job.concurrency,
            staleness=staleness,
            send=send,
            seed=seed,
            trace=job.trace,
            trace_sample=job.trace_sample,
            journal=self._journaled if job.turn_checkpoints else None,
            checkpoints=job.turn_checkpoints,
        )
        self._journal: JournalWriter | None = None
        self.window = self.dispatcher.window
        self.out = Path(job.output_path)
        self.summary = CollectSummary(
            output_path=str(self.out),
            failures_path=str(failures_path(self.out)),
            materialized_path=str(sibling_path(self.out, "materialized_inputs.jsonl")),
        )
        self._rng = random.Random(seed)
        self._reward_total = 0.0
        self._latencies: list[float] = []
        self._classes: Counter[str] = Counter()
        self._time_split: defaultdict[str, float] = defaultdict(float)
        self._started = time.perf_counter()

    async def run(self) -> CollectSummary:
        progress, journal = self._prepare_files()
        turns = JournalWriter(journal_path(self.out)) if self.job.turn_checkpoints else nullcontext(None)
        with (
            JsonlWriter(self.out) as writer,
            JsonlWriter(failures_path(self.out)) as failed,
            JsonlWriter(self.summary.materialized_path, append=False, flush=False) as materialized,
            turns as self._journal,
        ):
            self._writer, self._failed = writer, failed
            await self._dispatch(progress, journal, materialized)
        self._journal = None
        if self.job.trace is not None:
            tracing.flush()
        if self.job.turn_checkpoints and not self.summary.failures:  # nothing left to go on from
            journal_path(self.out).unlink(missing_ok=True)
        if self.job.ordered:
            self.summary.ordered_path = str(write_ordered(self.out))
        self.summary.finished = True
        return self.snapshot()

    async def _dispatch(self, progress: Progress, journal: Journal, materialized: JsonlWriter) -> None:
        """Start every rollout of the input the files do not hold yet (from its last journaled turn), then wait."""
        running: set[asyncio.Task[Outcome]] = set()
        last_line = 0
        for rollout in materialize(self.job, self._on_bad_row, self.dispatcher):
            if rollout.line != last_line:
                self.summary.rows_read += 1
                last_line = rollout.line
            materialized.write(rollout.row)
            self.summary.rollouts_expected += 1
            key = rollout.key
            if key in progress.done:
                self.summary.rollouts_resumed += 1
                continue
            if key in progress.failed_for_good:
                self.summary.failures_kept += 1
                continue
            checkpoint = journal.checkpoints.get(key)
            if checkpoint is not None:
                rollout = dataclasses.replace(rollout, resume=checkpoint)
                self.summary.rollouts_resumed_mid_way += 1
                self.summary.turns_restored += checkpoint.turn
            task = await self.dispatcher.start(rollout, spent=progress.attempts.get(key, 0))
            task.add_done_callback(self._record)
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)

    def snapshot(self) -> CollectSummary:
        s = self.summary
        s.elapsed_s = time.perf_counter() - self._started
        s.rollouts_per_s = s.rollouts / s.elapsed_s if s.elapsed_s > 0 else 0.0
        s.in_flight = self.dispatcher.in_flight
        s.window = int(self.window.limit)
        s.backpressure_waits = self.dispatcher.backpressure_waits
        s.failures_by_class = dict(self._classes)
        s.time_split_s = {k: round(v, 6) for k, v in self._time_split.items()}
        s.driver_rss_mb = _rss_mb()
        if self._latencies:
            ordered = sorted(self._latencies)
            pick = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))]  # noqa: E731
            s.latency_p50_s, s.latency_p95_s, s.latency_p99_s = pick(0.5), pick(0.95), pick(0.99)
        return s.model_copy()

    def _prepare_files(self) -> tuple[Progress, Journal]:
        if self.job.resume:
            progress = load_progress(self.out, failures_path(self.out), self.job.max_attempts)
            if not self.job.turn_checkpoints:
                return progress, Journal()
            journal = load_journal(journal_path(self.out), progress.done | progress.failed_for_good)
            self.summary.journal_skipped = [f"line {n}: {why}" for n, why in journal.skipped[:_SKIPPED_SHOWN]]
            if len(journal.skipped) > _SKIPPED_SHOWN:
                self.summary.journal_skipped.append(f"and {len(journal.skipped) - _SKIPPED_SHOWN} more")
            return progress, journal
        for path in (self.out, failures_path(self.out), journal_path(self.out)):
            path.unlink(missing_ok=True)
        return Progress(), Journal()

    def _journaled(self, key: Key, record: dict[str, Any]) -> None:
        if self._journal is not None:
            self._journal(key, record)

    def _on_bad_row(self, line: int, error: InputError) -> None:
        self.summary.rows_read += 1
        self.summary.rows_skipped += 1
        failure = failure_row({"line": line, "source": self.job.input_path}, FailureKind.BAD_INPUT, str(error), 0)
        self._failed.write(failure)
        self._classes[FailureKind.BAD_INPUT.value] += 1

    def _record(self, task: asyncio.Task[Outcome]) -> None:
        if task.cancelled():
            return
        outcome = task.result()
        self.summary.retries += outcome.retries
        if outcome.ok:
            self._record_success(outcome)
        else:
            self._record_failure(outcome)

    def _record_failure(self, outcome: Outcome) -> None:
        assert outcome.kind is not None
        self._failed.write(outcome.row)
        self._classes[outcome.kind.value] += 1
        self.summary.failures += 1

    def _record_success(self, outcome: Outcome) -> None:
        result, latency = outcome.row, outcome.latency_s
        self._writer.write(result)
        s = self.summary
        s.rollouts += 1
        self._reward_total += float(result.get("reward", 0.0))
        s.mean_reward = self._reward_total / s.rollouts
        for part in ("model_s", "tool_s", "verify_s"):
            self._time_split[part] += float((result.get("_gs_timings") or {}).get(part, 0.0))
        if len(self._latencies) < _LATENCY_SAMPLES:
            self._latencies.append(latency)
        else:  # reservoir sampling keeps the percentiles honest in bounded memory
            slot = self._rng.randrange(s.rollouts)
            if slot < _LATENCY_SAMPLES:
                self._latencies[slot] = latency


def _rss_mb() -> float | None:
    """This process's resident set size (Linux), to show the driver's memory stays bounded."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def write_ordered(output: Path) -> Path:
    """Copy the output into `<out>_ordered.jsonl` sorted by (agent, task, rollout), holding one offset per key."""
    import orjson

    index: list[tuple[Key, int, int]] = []
    with output.open("rb") as source:
        offset = 0
        for raw in source:
            index.append((rollout_key(orjson.loads(raw)), offset, len(raw)))
            offset += len(raw)
        index.sort()
        target_path = sibling_path(output, "ordered.jsonl")
        with target_path.open("wb") as target:
            for _, start, length in index:
                source.seek(start)
                target.write(source.read(length))
    return target_path


@ray.remote(num_cpus=0)
class RolloutDriver:
    """Runs one collection at a time; `progress()` may be polled while `collect()` runs."""

    def __init__(self) -> None:
        self._collection: Collection | None = None

    def progress(self) -> CollectSummary:
        if self._collection is None:
            return CollectSummary(driver_rss_mb=_rss_mb())
        return self._collection.snapshot()

    async def collect(self, job: CollectJob) -> CollectSummary:
        self._collection = Collection(job)
        return await self._collection.run()


@contextmanager
def driver_on(node: str | None = None) -> Iterator[Any]:
    """A `RolloutDriver` on `node` (default: this process's node, where the input and output files are), stopped
    when the block ends."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    placement = NodeAffinitySchedulingStrategy(node or ray.get_runtime_context().get_node_id(), soft=False)
    actor: Any = RolloutDriver  # `@ray.remote` made the class an actor class, which type checkers do not see
    driver = actor.options(scheduling_strategy=placement).remote()
    try:
        yield driver
    finally:
        ray.kill(driver)


def follow(
    driver: Any, job: CollectJob, on_progress: Callable[[CollectSummary], None], *, every_s: float = 0.25
) -> CollectSummary:
    """Run `job` on `driver`, calling `on_progress` with its progress every `every_s` (and once at the end)."""
    pending = driver.collect.remote(job)
    while True:
        ready, _ = ray.wait([pending], timeout=every_s)
        on_progress(ray.get(driver.progress.remote()))
        if ready:
            summary: CollectSummary = ray.get(pending)
            return summary
