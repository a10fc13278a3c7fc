"""A `/v1/rollouts` batch: its rollouts run through the dispatcher and stream back as NDJSON lines.

Lines go out as rollouts finish, or whole groups with `group_size` (one agent's task's rollouts together,
finished early by a `group_policy`: `gym_serve.collect.groups`). The batch holds a lease on its in-flight
slots and gives each back as its rollout's outcome is known; however the response ends (done, or the client
went away), the batch closes once: its unfinished rollouts are cancelled down the handle calls
(`gym_serve.calls.batching`) so the replicas stop working on them, their slots come back, and they count as
`cancelled`.

A running batch is known to its replica by its id (the `Batch-Id` header; the request's `batch_id`, else its
`idempotency_key`, else a new one): `POST /v1/rollouts/{id}/pause` stops it at its rollouts' next turn
boundaries, and the stream then sends every unfinished rollout as a partial and ends. The batch's state (each
rollout's progress at its last completed turn) lives in this replica while the batch runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gym_serve.collect.attempts import Outcome
from gym_serve.collect.dispatch import Rollout, RolloutStream
from gym_serve.collect.groups import Grouped, GroupPolicy
from gym_serve.collect.staleness import Staleness
from gym_serve.deployments.ingress.replica import Replica
from gym_serve.deployments.ingress.slots import Lease

__all__ = ["Batch", "BatchResponse", "NDJSONResponse"]


class NDJSONResponse(StreamingResponse):
    media_type = "application/x-ndjson"


class Batch:
    """The rollouts of one `/v1/rollouts` request: runs and streams them, and gives its slots back exactly once.

    `pending` are the rollouts to run (by their index in the batch); `replayed` (finished in an earlier request
    with the same idempotency key) and `failed` rows go out first, or into their groups.
    """

    def __init__(
        self,
        replica: Replica,
        lease: Lease,
        batch_id: str,
        pending: dict[int, Rollout],
        *,
        replayed: dict[int, tuple[Rollout, dict[str, Any]]],
        failed: list[dict[str, Any]],
        group_size: int | None,
        group_policy: GroupPolicy | None,
        key: str | None,
        staleness: Staleness | None,
    ) -> None:
        self.replica, self.lease, self.id, self.pending = replica, lease, batch_id, pending
        self.replayed, self.failed = replayed, failed
        self.group_size, self.group_policy = group_size, group_policy
        self.key, self.staleness = key, staleness
        self.running: RolloutStream | None = None
        self.closed = False
        self._index = {id(rollout): i for i, rollout in pending.items()}
        self._started = time.perf_counter()
        replica.batches[batch_id] = self

    async def pause(self) -> int:
        """Stop at the next turn boundaries (`RolloutStream.pause`); returns how many rollouts were running."""
        return await self.running.pause() if self.running is not None else 0

    async def lines(self) -> AsyncIterator[bytes]:
        try:
            for row in self.failed:
                yield _line(row)
            self.running = self.replica.dispatcher.stream(
                self.pending.values(), self.staleness, batch=self.id, on_outcome=self._ended
            )
            if self.group_size is None:
                for _, row in self.replayed.values():
                    yield _line(row)
                async for _, outcome in self.running:
                    yield _line(outcome.row)
            else:
                planned: Iterable[Rollout] = [*self.pending.values(), *(r for r, _ in self.replayed.values())]
                grouped = Grouped(self.running, planned, self.group_size, self.group_policy, self.replayed.values())
                async for rows in grouped:
                    yield b"".join(_line(row) for row in rows)
        finally:  # done, or the client went away: stop what is still running
            self.close()

    def _ended(self, rollout: Rollout, outcome: Outcome) -> None:
        """A rollout's outcome is known: its slot goes back, the metrics hear it, an idempotent batch keeps it."""
        self.lease.release()
        kind = "partial" if outcome.partial else outcome.kind or "ok"
        self.replica.metrics.finished(kind, time.perf_counter() - self._started)
        if self.key is not None and outcome.ok and not outcome.partial:
            self.replica.idempotency.record(self.key, self._index[id(rollout)], outcome.row)

    def close(self) -> None:
        """Cancel unfinished rollouts and give back their slots (idempotent: the stream and the response call it)."""
        if self.closed:
            return
        self.closed = True
        if self.replica.batches.get(self.id) is self:
            del self.replica.batches[self.id]
        if self.running is not None:
            self.running.cancel()
        for _ in range(self.lease.close()):
            self.replica.metrics.finished("cancelled")
        if self.key is not None:
            self.replica.idempotency.end(self.key)


def _line(row: dict[str, Any]) -> bytes:
    return json.dumps(row).encode() + b"\n"


class BatchResponse(NDJSONResponse):
    """Streams a `Batch` as NDJSON and closes it however the response ends.

    The stream's own `finally` does not run if the client goes away before the
    first line (the generator never started), so the response closes it too.
    """

    def __init__(self, batch: Batch, headers: dict[str, str] | None = None) -> None:
        super().__init__(batch.lines(), headers={"Batch-Id": batch.id, **(headers or {})})
        self._batch = batch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._batch.close()
