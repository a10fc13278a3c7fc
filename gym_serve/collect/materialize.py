"""A collection's input rows turned into rollout rows.

`materialize` reads the input lazily and yields one row per rollout, with
NeMo Gym's index semantics: identical raw rows share a `_ng_task_index`
(unless a row carries its own), and a task's rollouts are numbered
`_ng_rollout_index` 0, 1, ... on across its rows. Every row is validated once,
here, against the protocol models (`gym_serve.wire.responses.row_problems`, with
the job's sampling overrides applied); a row that cannot run is reported with its
file, line and field, and skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gym_serve.collect.job import CollectJob
from gym_serve.collect.task_index import TaskIndex
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import scan_jsonl
from gym_serve.wire.responses import row_problems

__all__ = ["materialize"]


def materialize(
    job: CollectJob, on_bad_row: Callable[[int, InputError], None]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line, rollout_row)` for every rollout of the job's input (of its shard), lazily, in bounded memory.

    With `shard_count > 1`, every shard reads the whole input (task numbering is
    global) but yields only its own tasks; bad rows are reported by shard 0 alone.
    """
    with TaskIndex() as tasks:
        for line, row, error in scan_jsonl(job.input_path):
            if job.limit is not None and line > job.limit:
                break
            if error is None:
                error = _check_row(row, line, job)  # type: ignore[arg-type]
            if error is not None:
                if job.shard_index == 0:
                    on_bad_row(line, error)
                continue
            assert row is not None
            agent = row["agent_ref"]["name"] if "agent_ref" in row else job.default_agent
            assert agent is not None  # `_check_row` refused rows without an agent
            repeats = job.repeats_for(agent)
            task, first = tasks.claim_row(row, repeats)  # identical raw rows (as read, before defaults): one task
            row = {**row, "_ng_task_index": task}
            if task % job.shard_count != job.shard_index:
                continue
            if "agent_ref" not in row:
                row = {**row, "agent_ref": {"name": agent}}
            if job.params_overrides:
                row = {**row, "responses_create_params": {**row["responses_create_params"], **job.params_overrides}}
            for rollout in range(first, first + repeats):
                yield line, {**row, "_ng_rollout_index": rollout}


def _check_row(row: dict[str, Any], line: int, job: CollectJob) -> InputError | None:
    def bad(message: str, field: str) -> InputError:
        return InputError(message, source=job.input_path, line=line, field=field)

    checked = row
    params = row.get("responses_create_params")
    if job.params_overrides and isinstance(params, dict):  # what will run is what must be valid
        checked = {**row, "responses_create_params": {**params, **job.params_overrides}}
    problems = row_problems(checked)
    if problems:
        (field, first), rest = problems[0], problems[1:]
        more = "; ".join(f"`{f}`: {m}" for f, m in rest[:4])
        return bad(first + (f" (and {len(rest)} more: {more})" if rest else ""), field)
    ref = row.get("agent_ref")
    name = ref["name"] if ref is not None else job.default_agent
    if name is None:
        return bad(f"no `agent_ref` and no default agent (deployed: {', '.join(job.agents)})", "agent_ref")
    if name not in job.agents:
        return bad(f"unknown agent `{name}`; deployed: {', '.join(job.agents)}", "agent_ref.name")
    return None
