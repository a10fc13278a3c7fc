"""Micro-batching: calls of one moment share a request; failures stay with their call; slow calls hold up none."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from gym_serve.calls.batching import MicroBatcher, stream_batch


async def test_calls_of_one_turn_share_a_request_and_keep_their_results() -> None:
    sent: list[list[int]] = []

    async def send(items: list[int]) -> list[Any]:
        sent.append(items)
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]

    batcher: MicroBatcher[int, int] = MicroBatcher(send, max_size=4)
    results = await asyncio.gather(*(batcher(i) for i in range(6)), return_exceptions=True)
    assert sent == [[0, 1, 2, 3], [4, 5]]
    assert results[0] == 0 and results[4] == 40
    assert isinstance(results[3], ValueError) and str(results[3]) == "odd 3"


async def test_a_failed_request_fails_every_call_in_it() -> None:
    async def send(items: list[int]) -> list[int]:
        raise ConnectionError("replica died")

    batcher: MicroBatcher[int, int] = MicroBatcher(send)
    results = await asyncio.gather(*(batcher(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


async def test_streamed_results_arrive_as_calls_finish() -> None:
    async def work(i: int) -> int:
        await asyncio.sleep(10 if i == 0 else 0.01)
        return i

    batcher: MicroBatcher[tuple[int], int] = MicroBatcher(lambda calls: stream_batch(work, calls))
    slow = asyncio.ensure_future(batcher((0,)))
    fast = await asyncio.wait_for(asyncio.gather(*(batcher((i,)) for i in range(1, 5))), timeout=2)
    assert fast == [1, 2, 3, 4], "the slow call in the same batch held up no other"
    assert not slow.done()
    slow.cancel()


async def test_stream_batch_yields_what_finished_together_and_exceptions_as_values() -> None:
    async def work(i: int) -> int:
        if i == 2:
            raise KeyError(i)
        await asyncio.sleep(0.05 if i == 3 else 0)
        return i

    chunks = [chunk async for chunk in stream_batch(work, [(i,) for i in range(4)])]
    assert sorted(i for i, _ in chunks[0]) == [0, 1, 2] and chunks[-1] == [(3, 3)]
    assert isinstance(dict(chunks[0])[2], KeyError)


async def test_a_caller_that_gives_up_does_not_break_the_batch() -> None:
    async def send(items: list[float]) -> list[float]:
        await asyncio.sleep(0.1)
        return items

    batcher: MicroBatcher[float, float] = MicroBatcher(send)
    impatient = asyncio.wait_for(batcher(1.0), timeout=0.01)
    patient = batcher(2.0)
    results = await asyncio.gather(impatient, patient, return_exceptions=True)
    assert isinstance(results[0], TimeoutError) and results[1] == 2.0


@pytest.mark.parametrize("max_size", [1, 3])
async def test_max_size_bounds_each_request(max_size: int) -> None:
    sizes: list[int] = []

    async def send(items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    batcher: MicroBatcher[int, int] = MicroBatcher(send, max_size=max_size)
    await asyncio.gather(*(batcher(i) for i in range(7)))
    assert max(sizes) == max_size and sum(sizes) == 7


async def test_when_every_caller_gives_up_the_batch_is_cancelled_downstream() -> None:
    started: list[int] = []
    stopped: list[int] = []

    async def work(i: int) -> int:
        started.append(i)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.append(i)
            raise
        return i

    batcher: MicroBatcher[tuple[int], int] = MicroBatcher(lambda calls: stream_batch(work, calls))
    callers = [asyncio.ensure_future(batcher((i,))) for i in range(3)]
    await asyncio.sleep(0.05)
    callers[0].cancel()
    await asyncio.sleep(0.05)
    assert started == [0, 1, 2] and stopped == [], "others still wait: the batch goes on"
    for caller in callers[1:]:
        caller.cancel()
    await asyncio.sleep(0.05)
    assert sorted(stopped) == [0, 1, 2]


async def test_a_serve_style_reply_is_cancelled_when_abandoned() -> None:
    class Reply:
        """Stands in for a DeploymentResponseGenerator: an async iterator with `cancel()`."""

        cancelled = False

        def __aiter__(self) -> Reply:
            return self

        async def __anext__(self) -> list[tuple[int, Any]]:
            await asyncio.sleep(3600)
            raise StopAsyncIteration

        def cancel(self) -> None:
            Reply.cancelled = True

    batcher: MicroBatcher[int, int] = MicroBatcher(lambda items: Reply())
    caller = asyncio.ensure_future(batcher(1))
    await asyncio.sleep(0.02)
    caller.cancel()
    await asyncio.sleep(0.02)
    assert Reply.cancelled


async def test_a_turn_is_split_into_one_request_per_replica() -> None:
    sent: list[list[int]] = []
    replicas = 3

    async def send(items: list[int]) -> list[int]:
        sent.append(items)
        return [i * 10 for i in items]

    batcher = MicroBatcher(send, parts=lambda: replicas)
    assert await asyncio.gather(*(batcher(i) for i in range(7))) == [i * 10 for i in range(7)]
    assert sorted(len(part) for part in sent) == [2, 2, 3] and sorted(sum(sent, [])) == list(range(7))
    sent.clear()
    replicas = 8  # more replicas than calls: one call per request, no empty requests
    await asyncio.gather(*(batcher(i) for i in range(3)))
    assert sorted(map(len, sent)) == [1, 1, 1]


async def test_calls_with_a_routing_key_travel_in_requests_of_their_own_key() -> None:
    """A rollout pinned to a replica: its calls go in a request carrying its key, never mixed with another key's."""
    sent: list[tuple[str | None, list[str]]] = []

    async def send(items: list[str], key: str | None) -> list[str]:
        sent.append((key, items))
        return [f"{key}:{item}" for item in items]

    def route(item: str) -> str | None:
        return None if item.startswith("new") else item.split("-")[0]

    batcher: MicroBatcher[str, str] = MicroBatcher(send, parts=lambda: 2, route=route)
    items = ["a-1", "new-1", "b-1", "a-2", "new-2", "new-3", "b-2"]
    results = await asyncio.gather(*(batcher(item) for item in items))
    assert results == ["a:a-1", "None:new-1", "b:b-1", "a:a-2", "None:new-2", "None:new-3", "b:b-2"]
    assert sorted(sent, key=str) == sorted(
        [("a", ["a-1", "a-2"]), ("b", ["b-1", "b-2"]), (None, ["new-1", "new-3"]), (None, ["new-2"])], key=str
    ), "one request per key; calls without a key split over the replicas"


async def test_each_request_of_a_turn_is_sent_from_a_fresh_context() -> None:
    """In a Serve replica a handle call takes its request id from the context it is made in (see `_start`)."""
    caller_request: contextvars.ContextVar[str] = contextvars.ContextVar("caller_request", default="")
    seen: list[str] = []

    async def send(items: list[int]) -> list[int]:
        seen.append(caller_request.get())
        return items

    batcher = MicroBatcher(send, parts=lambda: 3)

    async def call(i: int) -> int:
        caller_request.set(f"request-{i}")
        return await batcher(i)

    assert await asyncio.gather(*(call(i) for i in range(3))) == [0, 1, 2]
    assert seen == ["", "", ""]
