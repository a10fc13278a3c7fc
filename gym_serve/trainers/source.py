"""Where an adapter gets its rollouts: gym-serve over HTTP (`GymClient`) or in the cluster (`ServeRollouts`).

Both have the same `rollouts(rows, num_repeats=..., **sampling)` method, an
async iterator of rollout rows (or failure rows) as they finish, so every
adapter takes either. Trainers ask in groups: "G rollouts of this prompt, in
the order I gave", which `run_groups` answers from that unordered stream.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

__all__ = ["RecordedRollouts", "RolloutSource", "SourceFactory", "run_groups", "run_groups_sync"]


class RolloutSource(Protocol):
    """Anything that runs rollout rows and yields the rollouts (or failure rows) as they finish."""

    def rollouts(
        self, rows: Iterable[dict[str, Any]], *, num_repeats: int = 1, **sampling: Any
    ) -> AsyncIterator[dict[str, Any]]: ...


class RecordedRollouts:
    """A source that replays rollout rows recorded earlier (a collection's output file), for a dry run of a
    trainer's setup without a cluster: each request takes the next recorded rollouts, in order, stamped with the
    task and rollout index it asked for. It runs out loudly, never repeats a rollout.
    """

    def __init__(self, recorded: Iterable[dict[str, Any]]) -> None:
        self.recorded = list(recorded)
        self.taken = 0

    async def __aenter__(self) -> RecordedRollouts:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def rollouts(
        self, rows: Iterable[dict[str, Any]], *, num_repeats: int = 1, **sampling: Any
    ) -> AsyncIterator[dict[str, Any]]:
        for row in rows:
            for k in range(num_repeats):
                if self.taken == len(self.recorded):
                    raise RuntimeError(f"all {len(self.recorded)} recorded rollouts were replayed")
                rollout = self.recorded[self.taken]
                self.taken += 1
                yield {**rollout, "_ng_task_index": row.get("_ng_task_index"), "_ng_rollout_index": k}


SourceFactory = Callable[[], AbstractAsyncContextManager[RolloutSource]]
"""Opens a source for one batch, e.g. `lambda: GymClient(url, token=token)`; for callers without an event loop."""


async def run_groups(
    source: RolloutSource, rows: Sequence[dict[str, Any]], repeats: Sequence[int], **sampling: Any
) -> list[list[dict[str, Any]]]:
    """`repeats[i]` rollouts of `rows[i]` for every i, returned as groups in input order, each by rollout index.

    Task `i` is sent as `_ng_task_index: i`, so groups cannot mix even when the
    same row is asked for twice. Failure rows come back in their places.
    """
    if len(rows) != len(repeats):
        raise ValueError(f"{len(rows)} rows but {len(repeats)} repeat counts")
    by_count: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for index, (row, count) in enumerate(zip(rows, repeats, strict=True)):
        by_count[count].append({**row, "_ng_task_index": index})
    groups: list[list[dict[str, Any]]] = [[] for _ in rows]

    async def collect(count: int, batch: list[dict[str, Any]]) -> None:
        async for result in source.rollouts(batch, num_repeats=count, **sampling):
            groups[int(result["_ng_task_index"])].append(result)

    await asyncio.gather(*(collect(count, batch) for count, batch in by_count.items()))
    for index, (group, count) in enumerate(zip(groups, repeats, strict=True)):
        if len(group) != count:
            raise RuntimeError(f"task {index}: asked for {count} rollouts, got {len(group)}")
        group.sort(key=lambda r: int(r.get("_ng_rollout_index") or 0))
    return groups


def run_groups_sync(
    factory: SourceFactory, rows: Sequence[dict[str, Any]], repeats: Sequence[int], **sampling: Any
) -> list[list[dict[str, Any]]]:
    """`run_groups` for a synchronous trainer hook (TRL's `rollout_func`): opens a source, runs, closes it."""

    async def once() -> list[list[dict[str, Any]]]:
        async with factory() as source:
            return await run_groups(source, rows, repeats, **sampling)

    return asyncio.run(once())
