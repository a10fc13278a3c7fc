"""The idempotency cache: replay of finished rollouts, conflicts, and its bounds (TTL, max rows)."""

from __future__ import annotations

import pytest

from gym_serve.deployments.ingress.idempotency import IdempotencyCache, IdempotencyConflict, IdempotencyMismatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_resend_replays_finished_rows_only() -> None:
    cache = IdempotencyCache(ttl_s=60, max_rollouts=10)
    assert cache.begin("k", "body") == {}
    cache.record("k", 0, {"reward": 1.0})
    cache.record("k", 2, {"reward": 0.0})
    cache.end("k")
    assert cache.begin("k", "body") == {0: {"reward": 1.0}, 2: {"reward": 0.0}}


def test_a_running_key_conflicts_and_another_body_mismatches() -> None:
    cache = IdempotencyCache(ttl_s=60, max_rollouts=10)
    cache.begin("k", "body")
    with pytest.raises(IdempotencyConflict, match="`k` is still running"):
        cache.begin("k", "body")
    with pytest.raises(IdempotencyMismatch, match="different request body"):
        cache.begin("k", "other body")
    cache.end("k")
    assert cache.begin("k", "body") == {}


def test_keys_expire_after_the_ttl_but_not_while_running() -> None:
    clock = Clock()
    cache = IdempotencyCache(ttl_s=10, max_rollouts=10, clock=clock)
    cache.begin("running", "b")
    cache.record("running", 0, {"r": 1})
    cache.begin("done", "b")
    cache.record("done", 0, {"r": 1})
    cache.end("done")
    clock.now = 11
    assert cache.begin("other", "b") == {}  # expiry happens on the way
    assert len(cache) == 1, "`done` expired with its row; `running` is kept"
    with pytest.raises(IdempotencyConflict):
        cache.begin("running", "b")
    assert cache.begin("done", "b") == {}, "an expired key starts afresh"


def test_the_row_bound_evicts_the_oldest_finished_batch_first() -> None:
    cache = IdempotencyCache(ttl_s=60, max_rollouts=3)
    for key in ("a", "b"):
        cache.begin(key, "x")
        cache.record(key, 0, {"key": key})
        cache.end(key)
    cache.begin("c", "x")
    cache.record("c", 0, {"key": "c"})
    cache.record("c", 1, {"key": "c"})  # full: `a`, the least recently used, goes
    assert len(cache) == 3
    cache.end("c")
    assert cache.begin("a", "x") == {} and cache.begin("b", "x") == {0: {"key": "b"}}


def test_a_running_batch_past_the_bound_stops_recording() -> None:
    cache = IdempotencyCache(ttl_s=60, max_rollouts=2)
    cache.begin("big", "x")
    for i in range(5):
        cache.record("big", i, {"i": i})
    cache.end("big")
    assert sorted(cache.begin("big", "x")) == [0, 1] and len(cache) == 2


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="ttl_s > 0"):
        IdempotencyCache(ttl_s=0, max_rollouts=1)
