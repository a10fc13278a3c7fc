"""The rollout driver: a Ray actor that fans rollouts out to agent applications.

It reads input rows lazily (`gym_serve.collect.materialize`), writes each rollout row
to `<out>_materialized_inputs.jsonl` before dispatching it, keeps in flight at
most what the agent tier can hold (an `AdaptiveWindow` that shrinks when Serve
pushes back), and appends every finished rollout to the output at once.
Memory is bounded by the in-flight window, not by the input's size.

Nothing is dropped: a bad row is written to `<out>_failures.jsonl` as
`bad_input` with its line; a rollout that fails is retried with exponential
backoff and jitter if its failure is retryable (a replica died, back-pressure,
a timeout, a model endpoint error) and written as a failure row otherwise.
Every rollout attempt has a deadline. `resume` continues from the files on
disk (`gym_serve.collect.resume`) without running a finished key again.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel, Field

from gym_serve.collect.materialize import CollectJob, Key, materialize, rollout_key, sibling_path
from gym_serve.collect.resume import Progress, load_progress
from gym_serve.collect.window import AdaptiveWindow
from gym_serve.errors import InputError
from gym_serve.failures import RETRYABLE, classify
from gym_serve.serving.batching import MicroBatcher, agent_batcher
from gym_serve.wire.jsonl import JsonlWriter

__all__ = ["Collection", "CollectJob", "CollectSummary", "RolloutDriver", "failures_path", "write_ordered"]

_LATENCY_SAMPLES = 10_000
_MAX_BACKPRESSURE_WAITS = 1_000
"""Back-pressure is a signal to slow down, not a failure: it costs no attempt, up to this many waits."""

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Runs one rollout row on the named agent and returns the rollout."""


class CollectSummary(BaseModel):
    """The outcome of a collection, and its progress while it runs.

    Accounting: `rows_read = rows_ran + rows_skipped`, and every expected rollout
    ends up exactly once in the output or the failures file:
    `rollouts_expected = rollouts + rollouts_resumed + failures + failures_kept`.
    """

    rows_read: int = 0
    rows_skipped: int = 0
    rollouts_expected: int = 0
    rollouts: int = 0
    rollouts_resumed: int = 0
    failures: int = 0
    failures_kept: int = 0
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    retries: int = 0
    backpressure_waits: int = 0
    in_flight: int = 0
    window: int = 0
    elapsed_s: float = 0.0
    rollouts_per_s: float = 0.0
    mean_reward: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    latency_p99_s: float | None = None
    time_split_s: dict[str, float] = Field(default_factory=dict, description="Summed model/tool/verify seconds.")
    driver_rss_mb: float | None = Field(default=None, description="The driver process's resident memory now.")
    finished: bool = False
    output_path: str = ""
    failures_path: str = ""
    materialized_path: str = ""
    ordered_path: str | None = None


def failures_path(output_path: str | Path) -> Path:
    return sibling_path(output_path, "failures.jsonl")


class Collection:
    """One collection's run: dispatch, retries, bookkeeping. The actor below hosts it; tests may too."""

    def __init__(self, job: CollectJob, call: Call, *, seed: int = 0) -> None:
        self.job = job
        self.call = call
        self.out = Path(job.output_path)
        self.summary = CollectSummary(
            output_path=str(self.out),
            failures_path=str(failures_path(self.out)),
            materialized_path=str(sibling_path(self.out, "materialized_inputs.jsonl")),
        )
        self.window = AdaptiveWindow(job.concurrency)
        self._rng = random.Random(seed)
        self._reward_total = 0.0
        self._latencies: list[float] = []
        self._classes: Counter[str] = Counter()
        self._time_split: Counter[str] = Counter()
        self._started = time.perf_counter()

    async def run(self) -> CollectSummary:
        progress = self._prepare_files()
        with (
            JsonlWriter(self.out) as writer,
            JsonlWriter(failures_path(self.out)) as failed,
            JsonlWriter(self.summary.materialized_path, append=False, flush=False) as materialized,
        ):
            self._writer, self._failed = writer, failed
            running: set[asyncio.Task[None]] = set()
            last_line = 0
            for line, row in materialize(self.job, self._on_bad_row):
                if line != last_line:
                    self.summary.rows_read += 1
                    last_line = line
                materialized.write(row)
                self.summary.rollouts_expected += 1
                key = rollout_key(row)
                if key in progress.done:
                    self.summary.rollouts_resumed += 1
                    continue
                if key in progress.failed_for_good:
                    self.summary.failures_kept += 1
                    continue
                await self.window.acquire()
                self.summary.in_flight += 1
                task = asyncio.create_task(self._run_one(row, progress.attempts.get(key, 0)))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running)
        if self.job.ordered:
            self.summary.ordered_path = str(write_ordered(self.out))
        self.summary.finished = True
        return self.snapshot()

    def snapshot(self) -> CollectSummary:
        s = self.summary
        s.elapsed_s = time.perf_counter() - self._started
        s.rollouts_per_s = s.rollouts / s.elapsed_s if s.elapsed_s > 0 else 0.0
        s.window = int(self.window.limit)
        s.failures_by_class = dict(self._classes)
        s.time_split_s = {k: round(v, 6) for k, v in self._time_split.items()}
        s.driver_rss_mb = _rss_mb()
        if self._latencies:
            ordered = sorted(self._latencies)
            pick = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))]  # noqa: E731
            s.latency_p50_s, s.latency_p95_s, s.latency_p99_s = pick(0.5), pick(0.95), pick(0.99)
        return s.model_copy()

    def _prepare_files(self) -> Progress:
        if self.job.resume:
            return load_progress(self.out, failures_path(self.out), self.job.max_attempts)
        for path in (self.out, failures_path(self.out)):
            path.unlink(missing_ok=True)
        return Progress()

    def _on_bad_row(self, line: int, error: InputError) -> None:
        self.summary.rows_read += 1
        self.summary.rows_skipped += 1
        self._failed.write({"_ng_failure_class": "bad_input", "error": str(error), "line": line,
                            "source": self.job.input_path, "attempts": 0})
        self._classes["bad_input"] += 1

    async def _run_one(self, row: dict[str, Any], spent: int) -> None:
        try:
            await self._attempts(row, spent)
        finally:
            self.summary.in_flight -= 1
            await self.window.release()

    async def _attempts(self, row: dict[str, Any], spent: int) -> None:
        agent = row["agent_ref"]["name"]
        attempt, waits = spent, 0
        while True:
            attempt += 1
            started = time.perf_counter()
            try:
                result = await asyncio.wait_for(self.call(agent, row), self.job.rollout_timeout_s)
            except Exception as e:  # a failed rollout is data: classify, maybe retry, else record
                failure_class = classify(e)
                if failure_class == "backpressure" and waits < _MAX_BACKPRESSURE_WAITS:
                    self.window.on_backpressure()
                    self.summary.backpressure_waits += 1
                    attempt, waits = attempt - 1, waits + 1
                    await asyncio.sleep(self._backoff(waits))
                    continue
                if failure_class in RETRYABLE and attempt < self.job.max_attempts:
                    self.summary.retries += 1
                    await asyncio.sleep(self._backoff(attempt))
                    continue
                self._record_failure(row, e, failure_class, attempt)
                return
            self.window.on_success()
            self._record_success(result, time.perf_counter() - started)
            return

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter, capped at 5 s."""
        return self._rng.uniform(0.5, 1.0) * min(5.0, 0.05 * 2**attempt)

    def _record_failure(self, row: dict[str, Any], error: BaseException, failure_class: str, attempts: int) -> None:
        message = str(error) or type(error).__name__
        if isinstance(error, TimeoutError):
            message = f"rollout did not finish within {self.job.rollout_timeout_s} s"
        self._failed.write({**row, "_ng_failure_class": failure_class, "error": message, "attempts": attempts})
        self._classes[failure_class] += 1
        self.summary.failures += 1

    def _record_success(self, result: dict[str, Any], latency: float) -> None:
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
    """Copy the output into `<out>_ordered.jsonl` sorted by (agent, task, rollout), one key's offset in memory at a time."""
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
        self._batchers: dict[str, MicroBatcher[dict[str, Any], dict[str, Any]]] = {}

    def progress(self) -> dict[str, Any]:
        if self._collection is None:
            return CollectSummary(driver_rss_mb=_rss_mb()).model_dump()
        return self._collection.snapshot().model_dump()

    async def collect(self, job_dict: dict[str, Any]) -> dict[str, Any]:
        self._collection = Collection(CollectJob.model_validate(job_dict), self._call)
        return (await self._collection.run()).model_dump()

    async def _call(self, agent: str, row: dict[str, Any]) -> dict[str, Any]:
        """Rows go to an agent in micro-batches, one streaming Serve request per batch (`gym_serve.serving.batching`)."""
        batcher = self._batchers.get(agent)
        if batcher is None:
            batcher = self._batchers[agent] = agent_batcher(agent)
        return await batcher(row)
