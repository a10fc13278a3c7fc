"""A `/v1/rollouts` batch: its rollouts run through the dispatcher and stream back as NDJSON lines.

Lines go out as rollouts finish, or whole groups with `group_size` (one agent's task's rollouts together).
The batch holds a lease on its in-flight slots and gives each back as its rollout ends; however the response
ends (done, or the client went away), the batch closes once: its unfinished rollouts are cancelled down the
handle calls (`gym_serve.calls.batching`) so the replicas stop working on them, their slots come back, and
they count as `cancelled`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gym_serve.collect.dispatch import Rollout, RolloutStream
from gym_serve.collect.staleness import Staleness
from gym_serve.deployments.ingress.replica import Replica
from gym_serve.deployments.ingress.slots import Lease

__all__ = ["Batch", "BatchResponse", "NDJSONResponse"]


class NDJSONResponse(StreamingResponse):
    media_type = "application/x-ndjson"


class Batch:
    """The rollouts of one `/v1/rollouts` request: runs and streams them, and gives its slots back exactly once.

    `pending` are the rollouts to run (by their index in the batch); `replayed` and `failed` rows go out first.
    """

    def __init__(
        self,
        replica: Replica,
        lease: Lease,
        pending: dict[int, Rollout],
        replayed: dict[int, dict[str, Any]],
        failed: list[dict[str, Any]],
        group_size: int | None,
        key: str | None,
        staleness: Staleness | None,
    ) -> None:
        self.replica, self.lease, self.pending = replica, lease, pending
        self.replayed, self.failed = replayed, failed
        self.group_size, self.key, self.staleness = group_size, key, staleness
        self.running: RolloutStream | None = None
        self.closed = False

    async def lines(self) -> AsyncIterator[bytes]:
        groups: dict[Any, list[dict[str, Any]]] = {}
        try:
            for row in [*(self.replayed[i] for i in sorted(self.replayed)), *self.failed]:
                if (chunk := self._emit(groups, row)) is not None:
                    yield chunk
            index_of = {id(rollout): i for i, rollout in self.pending.items()}
            started = time.perf_counter()
            self.running = self.replica.dispatcher.stream(self.pending.values(), self.staleness)
            async for rollout, outcome in self.running:
                self.lease.release()
                self.replica.metrics.finished(outcome.kind or "ok", time.perf_counter() - started)
                if self.key is not None and outcome.ok:
                    self.replica.idempotency.record(self.key, index_of[id(rollout)], outcome.row)
                if (chunk := self._emit(groups, outcome.row)) is not None:
                    yield chunk
            for group in groups.values():  # groups smaller than group_size (num_repeats not a multiple)
                yield b"".join(json.dumps(r).encode() + b"\n" for r in group)
        finally:  # done, or the client went away: stop what is still running
            self.close()

    def _emit(self, groups: dict[Any, list[dict[str, Any]]], result: dict[str, Any]) -> bytes | None:
        if self.group_size is None or "_ng_task_index" not in result:
            return json.dumps(result).encode() + b"\n"
        task = ((result.get("agent_ref") or {}).get("name"), result.get("_ng_task_index"))  # one agent's task
        group = groups.setdefault(task, [])
        group.append(result)
        if len(group) < self.group_size:
            return None
        del groups[task]
        return b"".join(json.dumps(r).encode() + b"\n" for r in group)

    def close(self) -> None:
        """Cancel unfinished rollouts and give back their slots (idempotent: the stream and the response call it)."""
        if self.closed:
            return
        self.closed = True
        if self.running is not None:
            self.running.cancel()
        for _ in range(self.lease.close()):
            self.replica.metrics.finished("cancelled")
        if self.key is not None:
            self.replica.idempotency.end(self.key)


class BatchResponse(NDJSONResponse):
    """Streams a `Batch` as NDJSON and closes it however the response ends.

    The stream's own `finally` does not run if the client goes away before the
    first line (the generator never started), so the response closes it too.
    """

    def __init__(self, batch: Batch, headers: dict[str, str] | None = None) -> None:
        super().__init__(batch.lines(), headers=headers)
        self._batch = batch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._batch.close()
