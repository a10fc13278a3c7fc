"""A collection's input file turned into rollouts: the file door's reading, on the dispatcher's expansion.

`materialize` reads the input lazily (`gym_serve.wire.jsonl.scan_jsonl`: a line that is not one JSON object
is reported with its line) and expands its rows with the dispatcher (`gym_serve.collect.dispatch`: NeMo Gym's
numbering, overrides, per-agent repeats, every row validated once); a row that cannot run is reported with
its file, line and field, and skipped. With `shard_count > 1`, every shard reads the whole input (task
numbering is global) but yields only its own tasks; bad rows are reported by shard 0 alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gym_serve.collect.dispatch import Dispatcher, Rejected, Rollout
from gym_serve.collect.job import CollectJob
from gym_serve.errors import InputError
from gym_serve.wire.jsonl import scan_jsonl

__all__ = ["materialize"]


def materialize(
    job: CollectJob, on_bad_row: Callable[[int, InputError], None], dispatcher: Dispatcher | None = None
) -> Iterator[Rollout]:
    """Every rollout of the job's input (of its shard), lazily, in bounded memory; `on_bad_row(line, error)`."""
    dispatcher = dispatcher or Dispatcher(job.agents, default_agent=job.default_agent)
    reporting = job.shard_index == 0

    def rows() -> Iterator[tuple[int, Any]]:
        for line, row, error in scan_jsonl(job.input_path):
            if job.limit is not None and line > job.limit:
                break
            if error is None:
                yield line, row
            elif reporting:
                on_bad_row(line, error)

    for item in dispatcher.expand(
        rows(), num_repeats=job.num_repeats, overrides=job.params_overrides, source=job.input_path
    ):
        if isinstance(item, Rejected):
            if reporting:
                on_bad_row(item.line, item.error)
        elif item.task % job.shard_count == job.shard_index:
            yield item
