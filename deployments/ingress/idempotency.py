"""Idempotent rollout batches: a batch re-sent with the same key replays what already finished.

A trainer whose connection to the ingress drops mid-stream cannot tell which
rollouts of its batch finished; re-sending the batch must not run (and pay
for) them twice. The ingress keys each batch by the client's
`idempotency_key`: every rollout that finishes successfully is recorded under
the key and its index in the batch, and a later request with the same key
gets those rows replayed while only the rest run again. Failed rollouts are
not recorded, so a re-send retries them.

Rules:

- A key belongs to one request body: the same key with a different body is
  refused (`IdempotencyMismatch`, HTTP 422), as the key no longer names one batch.
- While a request with the key is still streaming, a second one is refused
  (`IdempotencyConflict`, HTTP 409 with `Retry-After`) rather than attached
  to the first: attaching would tie one batch to two connections that may be
  cancelled independently. A client that re-sends after its connection
  dropped may race the ingress noticing the drop; it simply retries the 409
  (`gym_serve.client` does), and the re-send then replays what finished.
- The cache is bounded: a key expires `ttl_s` after its last request ended,
  and at most `max_rollouts` rows are kept (the least recently used finished
  batches are evicted first; a running batch past the bound stops recording).

The cache lives in one process: with several ingress replicas, a re-send may
reach a replica that never saw the key and runs the whole batch again. Keep
the ingress at one replica where that matters, or put the cache in a shared
store (Redis, a Ray actor) — not built here.

Example:
    >>> cache = IdempotencyCache(ttl_s=60.0, max_rollouts=100)
    >>> cache.begin("k", "body-hash")
    {}
    >>> cache.record("k", 0, {"reward": 1.0})
    >>> cache.end("k")
    >>> cache.begin("k", "body-hash")
    {0: {'reward': 1.0}}
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gym_serve.errors import GymServeError

__all__ = ["IdempotencyCache", "IdempotencyConflict", "IdempotencyMismatch"]


class IdempotencyConflict(GymServeError):
    """Raised when a request reuses the key of a batch that is still streaming to another request."""

    def __init__(self, key: str) -> None:
        super().__init__(f"a batch with idempotency key `{key}` is still running; retry after it ends")
        self.key = key


class IdempotencyMismatch(GymServeError):
    """Raised when a key is reused with a different request body."""

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key `{key}` was used for a different request body; use a new key")
        self.key = key


@dataclass
class _Batch:
    fingerprint: str
    running: bool = True
    ended_at: float = 0.0
    results: dict[int, dict[str, Any]] = field(default_factory=dict)


class IdempotencyCache:
    """Finished rollouts by (idempotency key, index in the batch), bounded by age and by count."""

    def __init__(self, *, ttl_s: float, max_rollouts: int, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0 or max_rollouts < 0:
            raise ValueError(f"expected ttl_s > 0 and max_rollouts >= 0, got {ttl_s} and {max_rollouts}")
        self.ttl_s = ttl_s
        self.max_rollouts = max_rollouts
        self._clock = clock
        self._batches: OrderedDict[str, _Batch] = OrderedDict()  # least recently used first
        self._size = 0

    def __len__(self) -> int:
        """The number of rollouts kept."""
        return self._size

    def begin(self, key: str, fingerprint: str) -> dict[int, dict[str, Any]]:
        """Start a request for `key`; returns the rows to replay (index → rollout row), empty for a new key."""
        self._expire()
        batch = self._batches.get(key)
        if batch is None:
            self._batches[key] = _Batch(fingerprint)
            return {}
        if batch.fingerprint != fingerprint:
            raise IdempotencyMismatch(key)
        if batch.running:
            raise IdempotencyConflict(key)
        batch.running = True
        self._batches.move_to_end(key)
        return dict(batch.results)

    def record(self, key: str, index: int, row: dict[str, Any]) -> None:
        """Keep a finished rollout of the running batch `key` (dropped once the cache is full of running batches)."""
        batch = self._batches.get(key)
        if batch is None or index in batch.results:
            return
        while self._size >= self.max_rollouts and self._evict_one(keep=key):
            pass
        if self._size < self.max_rollouts:
            batch.results[index] = row
            self._size += 1

    def end(self, key: str) -> None:
        """The request for `key` ended (finished, failed or cancelled): its results stay replayable for `ttl_s`."""
        batch = self._batches.get(key)
        if batch is not None:
            batch.running = False
            batch.ended_at = self._clock()

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, b in self._batches.items() if not b.running and now - b.ended_at > self.ttl_s]:
            self._drop(key)

    def _evict_one(self, *, keep: str) -> bool:
        victim = next((k for k, b in self._batches.items() if not b.running and k != keep and b.results), None)
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _drop(self, key: str) -> None:
        self._size -= len(self._batches.pop(key).results)
