"""The rollout driver: a Ray actor that fans rollouts out to agent applications.

It reads input rows lazily, repeats each `num_repeats` times (stamping
`_ng_task_index` / `_ng_rollout_index`), keeps at most `concurrency` rollouts
in flight, and appends every finished rollout to the output file at once.
Memory is bounded by the in-flight window, not by the input's size.

Nothing is dropped: a bad row is reported with its line number and written to
`<out>_failures.jsonl` as `bad_input`; a rollout that raises is retried if
its failure is retryable (a replica died, back-pressure, a timeout), and
written as a failure row otherwise. The other rows keep running.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel, Field

from gym_serve.errors import InputError
from gym_serve.failures import RETRYABLE, classify
from gym_serve.jsonl import JsonlWriter, dumps, scan_jsonl

__all__ = ["CollectJob", "CollectSummary", "RolloutDriver", "failures_path", "materialize"]

_LATENCY_SAMPLES = 10_000


class CollectJob(BaseModel):
    """What to collect, and how hard to push."""

    input_path: str
    output_path: str
    agents: list[str] = Field(description="Names of the deployed agent applications rows may route to.")
    default_agent: str | None = Field(default=None, description="For rows without `agent_ref`.")
    num_repeats: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=1, description="Read at most this many input lines.")
    concurrency: int = Field(default=64, ge=1, description="Most rollouts in flight at once.")
    max_attempts: int = Field(default=3, ge=1, description="Tries per rollout for retryable failures.")


class CollectSummary(BaseModel):
    """The outcome of a collection. `rows_read = rows_skipped + tasks run`; every rollout is written once."""

    rows_read: int = 0
    rows_skipped: int = 0
    rollouts: int = 0
    failures: int = 0
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    retries: int = 0
    in_flight: int = 0
    elapsed_s: float = 0.0
    rollouts_per_s: float = 0.0
    mean_reward: float | None = None
    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    finished: bool = False
    output_path: str = ""
    failures_path: str = ""


def failures_path(output_path: str | Path) -> Path:
    path = Path(output_path)
    return path.with_name(f"{path.stem}_failures.jsonl")


def materialize(job: CollectJob, on_good_row: Any, on_bad_row: Any) -> Iterator[dict[str, Any]]:
    """Yield the rollout rows of `job`'s input, lazily: repeats stamped, agent resolved.

    Identical raw rows share a `_ng_task_index` (NeMo Gym's rule) unless the row
    carries its own; the rollouts of a task are numbered on across its rows, so
    five identical rows become rollouts 0-4 of one task. `on_bad_row(line, error)`
    is called for each row that cannot run.
    """
    task_of_row: dict[bytes, int] = {}
    rollouts_of_task: dict[int, int] = {}
    next_task = 0
    for number, row, error in scan_jsonl(job.input_path):
        if job.limit is not None and number > job.limit:
            break
        if error is None:
            error = _check_row(row, number, job)  # type: ignore[arg-type]
        if error is not None:
            on_bad_row(number, error)
            continue
        assert row is not None
        on_good_row()
        if "_ng_task_index" not in row:
            digest = hashlib.blake2b(dumps(row), digest_size=16).digest()
            if digest not in task_of_row:
                task_of_row[digest] = next_task
                next_task += 1
            row = {**row, "_ng_task_index": task_of_row[digest]}
        if "agent_ref" not in row:
            row = {**row, "agent_ref": {"name": job.default_agent}}
        first = rollouts_of_task.get(row["_ng_task_index"], 0)
        rollouts_of_task[row["_ng_task_index"]] = first + job.num_repeats
        for rollout in range(first, first + job.num_repeats):
            yield {**row, "_ng_rollout_index": rollout}


def _check_row(row: dict[str, Any], line: int, job: CollectJob) -> InputError | None:
    source = job.input_path
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        return InputError("missing `responses_create_params` (an object)", source=source, line=line,
                          field="responses_create_params")
    if not isinstance(params.get("input"), str | list):
        return InputError("`input` must be a string or a list of items", source=source, line=line,
                          field="responses_create_params.input")
    ref = row.get("agent_ref")
    name = ref.get("name") if isinstance(ref, dict) else job.default_agent
    if name is None:
        return InputError("no `agent_ref` and no default agent", source=source, line=line, field="agent_ref")
    if name not in job.agents:
        return InputError(f"unknown agent `{name}`; deployed: {', '.join(job.agents)}", source=source, line=line,
                          field="agent_ref.name")
    return None


@ray.remote(num_cpus=0)
class RolloutDriver:
    """Runs one collection at a time; `progress()` may be polled while `collect()` runs."""

    def __init__(self) -> None:
        self._summary = CollectSummary()
        self._handles: dict[str, Any] = {}

    def progress(self) -> dict[str, Any]:
        if not self._summary.finished and hasattr(self, "_started"):
            self._update_rates(self._summary, self._started)
        return self._summary.model_dump()

    async def collect(self, job_dict: dict[str, Any]) -> dict[str, Any]:
        job = CollectJob.model_validate(job_dict)
        out, fail = Path(job.output_path), failures_path(job.output_path)
        for path in (out, fail):
            path.unlink(missing_ok=True)
        summary = self._summary = CollectSummary(output_path=str(out), failures_path=str(fail))
        self._rewards_total = 0.0
        self._latencies: list[float] = []
        self._rng = random.Random(0)
        failures_by_class: Counter[str] = Counter()
        started = time.perf_counter()
        window = asyncio.Semaphore(job.concurrency)
        running: set[asyncio.Task[None]] = set()

        with JsonlWriter(out) as writer, JsonlWriter(fail) as failed:

            def record_failure(row: dict[str, Any], error: BaseException, failure_class: str, attempts: int) -> None:
                failed.write({**row, "_ng_failure_class": failure_class, "error": str(error), "attempts": attempts})
                failures_by_class[failure_class] += 1
                summary.failures += 1
                summary.failures_by_class = dict(failures_by_class)

            def on_good_row() -> None:
                summary.rows_read += 1

            def on_bad_row(line: int, error: InputError) -> None:
                summary.rows_read += 1
                summary.rows_skipped += 1
                failed.write({"_ng_failure_class": "bad_input", "error": str(error), "line": line,
                              "source": job.input_path, "attempts": 0})
                failures_by_class["bad_input"] += 1
                summary.failures_by_class = dict(failures_by_class)

            async def run_one(row: dict[str, Any]) -> None:
                try:
                    await self._run_with_retries(row, job, writer, record_failure)
                finally:
                    summary.in_flight -= 1
                    window.release()

            self._started = started
            for row in materialize(job, on_good_row, on_bad_row):
                await window.acquire()
                summary.in_flight += 1
                task = asyncio.create_task(run_one(row))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:
                await asyncio.gather(*list(running))
        self._update_rates(summary, started)
        summary.finished = True
        return summary.model_dump()

    async def _run_with_retries(self, row: dict[str, Any], job: CollectJob, writer: JsonlWriter, record_failure) -> None:
        agent = row["agent_ref"]["name"]
        for attempt in range(1, job.max_attempts + 1):
            t0 = time.perf_counter()
            try:
                result = await self._handle(agent).remote(row)
            except Exception as e:  # a failed rollout is data: classify, maybe retry, else record
                failure_class = classify(e)
                if failure_class in RETRYABLE and attempt < job.max_attempts:
                    self._summary.retries += 1
                    await asyncio.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + self._rng.random()))
                    continue
                record_failure(row, e, failure_class, attempt)
                return
            writer.write(result)
            self._record_success(result, time.perf_counter() - t0)
            return

    def _handle(self, agent: str) -> Any:
        handle = self._handles.get(agent)
        if handle is None:
            from ray import serve

            handle = self._handles[agent] = serve.get_app_handle(agent).run
        return handle

    def _record_success(self, result: dict[str, Any], latency: float) -> None:
        summary = self._summary
        summary.rollouts += 1
        self._rewards_total += float(result.get("reward", 0.0))
        summary.mean_reward = self._rewards_total / summary.rollouts
        if len(self._latencies) < _LATENCY_SAMPLES:
            self._latencies.append(latency)
        else:  # reservoir sampling keeps the percentiles honest in bounded memory
            slot = self._rng.randrange(summary.rollouts)
            if slot < _LATENCY_SAMPLES:
                self._latencies[slot] = latency

    def _update_rates(self, summary: CollectSummary, started: float) -> None:
        summary.elapsed_s = time.perf_counter() - started
        summary.rollouts_per_s = summary.rollouts / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
        if self._latencies:
            ordered = sorted(self._latencies)
            summary.latency_p50_s = ordered[len(ordered) // 2]
            summary.latency_p95_s = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
