"""Micro-batching of handle calls: many concurrent episodes, few Serve requests.

Every Serve request costs the caller and the replica roughly a millisecond of
CPU (routing, queue-length probes, pickling, the actor call), which on a
small machine caps a chain of deployments at a few hundred calls per second.
An agent replica runs many episodes at once, and they tend to move in step:
when one batch of answers comes back, all of those episodes make their next
call in the same event-loop turn. `MicroBatcher` gathers the calls made in one
turn into one request, and `stream_batch` fans a batch out on the receiving
replica and streams results back as they finish; a failure of one call comes
back as that call's exception, a failure of the whole request (a replica died)
as every call's.

Slow calls do not move in step: they finish a few at a time, and sending each
turn's calls at once would cost a request per call (~5 ms of CPU here, caller
and replica together). So the flush is Nagle's: with no request of this
batcher outstanding a call goes at once (no added latency when load is low);
otherwise it waits for company, at most 5 % of the calls' observed latency and
never more than `max_wait_s`. Batching thus adds at most 5 % to a call's latency.

With `parts`, each turn's calls are split into that many requests (one per
replica of the target: `gym_serve.calls.replica_count`), so that Serve's router
spreads a turn's work over the replicas instead of giving it all to one.

With `route`, calls that must reach a particular replica say so (a rollout's
session: the environment replica that holds it, or the model replica whose
prefix cache holds its history; `gym_serve.calls.routing`): `route(item)` is
the call's routing key, each turn's calls are grouped by key, and each group is
sent as `send(items, key)`, so the request carries its calls' key (calls without
a key are split by `parts` and sent with the key None).

A streaming call may also report progress before its result (`stream_batch(..., reports=True)` gives each
call a `report` function; the Agent reports each rollout's completed turns): a `Progress` value on the stream
goes to that call's `on_progress`, not to its result.

When every caller of a batch has given up (cancelled: a client went away, a
deadline passed), the batch's request is cancelled too, so the replica stops
the work (`stream_batch` cancels its calls, which cancels their own handle
calls in turn) instead of finishing rollouts nobody will read.

A call made in a traced rollout carries its trace context (`gym_serve.calls.tracing.carrier`): a request whose
calls carry any is sent with `traces=[carrier or None per call]`, and `stream_batch` runs each call in its own
span; untraced calls add no argument and no work.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gym_serve.calls import tracing

__all__ = ["BatchedResponses", "MicroBatcher", "Progress", "stream_batch"]

T = TypeVar("T")
R = TypeVar("R")


class Progress:
    """A report a streaming call sends before its result (see the module docstring)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


OnProgress = Callable[[Any], None]


@dataclass
class _Calls(Generic[T, R]):
    """Calls waiting to be sent (or sent in one request): each call's item, future, listener and trace context."""

    items: list[T] = field(default_factory=list)
    futures: list[asyncio.Future[R]] = field(default_factory=list)
    listeners: list[OnProgress | None] = field(default_factory=list)
    carriers: list[tracing.Carrier | None] = field(default_factory=list)

    def add(
        self, item: T, future: asyncio.Future[R], listener: OnProgress | None, carrier: tracing.Carrier | None
    ) -> None:
        self.items.append(item)
        self.futures.append(future)
        self.listeners.append(listener)
        self.carriers.append(carrier)

    def share(self, part: int, parts: int) -> _Calls[T, R]:
        """Calls part, part + parts, ...: one request's share when a flush is split over `parts` requests."""
        cut = slice(part, None, parts)
        return _Calls(self.items[cut], self.futures[cut], self.listeners[cut], self.carriers[cut])

    def traces(self) -> list[tracing.Carrier | None] | None:
        """The calls' trace contexts, or None when none is traced (the request then carries no such argument)."""
        return self.carriers if any(self.carriers) else None


class MicroBatcher(Generic[T, R]):
    """`await batcher(item)` → the item's result, sent to `send` together with the items of the same moment.

    `send(items)` (`send(items, key)` with `route`) returns either an awaitable of one result per item, in order,
    or an async iterator of lists of `(index, result)` pairs as results become
    ready (a streaming call: a slow item then holds up no other). A result that is
    an exception is raised to that item's caller.
    """

    def __init__(
        self,
        send: Callable[..., Any],
        *,
        max_size: int = 64,
        max_wait_s: float = 0.01,
        parts: Callable[[], int] | None = None,
        route: Callable[[T], str | None] | None = None,
    ) -> None:
        self._send = send
        self._max_size = max_size
        self._max_wait_s = max_wait_s
        self._parts = parts
        self._route = route
        self._outstanding = 0  # requests sent and not yet fully answered
        self.latency_s = 0.0  # moving average of a call's time from send to result
        self._pending: _Calls[T, R] = _Calls()
        self._timer: asyncio.Handle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def __call__(self, item: T, on_progress: OnProgress | None = None) -> R:
        """The item's result; `on_progress` hears the `Progress` values its call reports before it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.add(item, future, on_progress, tracing.carrier())
        if len(self._pending.items) >= self._max_size:
            self._flush()
        elif self._timer is None:
            wait = min(self._max_wait_s, _LATENCY_SHARE * self.latency_s) if self._outstanding else 0.0
            # no wait: the calls made in this event-loop turn go together
            self._timer = loop.call_later(wait, self._flush) if wait > 0 else loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, _Calls()
        groups: dict[str | None, _Calls[T, R]] = {}
        for call in zip(pending.items, pending.futures, pending.listeners, pending.carriers, strict=True):
            groups.setdefault(self._route(call[0]) if self._route else None, _Calls()).add(*call)
        for key, group in groups.items():
            parts = min(self._parts(), len(group.items)) if self._parts and key is None else 1
            for part in range(parts):  # each request gets a share
                self._start(group.share(part, parts), key)

    def _start(self, calls: _Calls[T, R], key: str | None) -> None:
        if calls.items:
            # A fresh context: in a Serve replica, a handle call takes its Serve request id from the calling
            # request's context, and the requests of one flush would all carry the id of the request whose
            # call started the flush (see also `SessionRouter._fulfill_next_pending_request`).
            context = contextvars.Context()
            task = asyncio.get_running_loop().create_task(self._deliver(calls, key), context=context)
            self._sending.add(task)  # keep a reference until it is done
            task.add_done_callback(self._sending.discard)
            abandon = functools.partial(_abandon_if_unwanted, task, calls.futures)
            for future in calls.futures:
                future.add_done_callback(abandon)

    async def _deliver(self, calls: _Calls[T, R], key: str | None) -> None:
        reply = None
        self._outstanding += 1
        started = time.perf_counter()
        futures, listeners, traces = calls.futures, calls.listeners, calls.traces()
        extra = {} if traces is None else {"traces": traces}
        try:
            reply = self._send(calls.items, key, **extra) if self._route else self._send(calls.items, **extra)
            if hasattr(reply, "__aiter__"):
                async for chunk in reply:
                    self._observe(time.perf_counter() - started)
                    for index, result in chunk:
                        if isinstance(result, Progress):
                            listener = listeners[index]
                            if listener is not None and not futures[index].done():
                                listener(result.value)
                        else:
                            _settle(futures[index], result)
                missing = RuntimeError("the batch's stream ended before this call's result")
                for future in futures:
                    _settle(future, missing)
            else:
                results = await reply
                self._observe(time.perf_counter() - started)
                for future, result in zip(futures, results, strict=True):
                    _settle(future, result)
        except BaseException as e:  # the whole request failed: every call in it not yet answered failed
            for future in futures:
                _settle(future, e)
            if isinstance(e, asyncio.CancelledError):
                cancel = getattr(reply, "cancel", None)  # a Serve response: cancel the replica's work as well
                if callable(cancel):
                    cancel()
                raise
        finally:
            self._outstanding -= 1

    def _observe(self, seconds: float) -> None:
        self.latency_s += _SMOOTHING * (seconds - self.latency_s)


_LATENCY_SHARE = 0.05
"""A call waits for company at most this share of the calls' latency."""
_SMOOTHING = 0.2


def _abandon_if_unwanted(
    task: asyncio.Task[None], futures: list[asyncio.Future[Any]], future: asyncio.Future[Any]
) -> None:
    """A caller gave up: once no caller of the batch waits any more, stop delivering it."""
    if future.cancelled() and not task.done() and all(f.done() for f in futures):
        task.cancel()


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():  # answered already, or its caller gave up (timed out, cancelled)
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


async def stream_batch(
    fn: Callable[..., Awaitable[Any]],
    calls: list[tuple[Any, ...]],
    traces: list[tracing.Carrier | None] | None = None,
    *,
    reports: bool = False,
) -> AsyncIterator[list[tuple[int, Any]]]:
    """Run `fn(*args)` for every call concurrently; yield `(index, result or exception)` pairs as calls finish.

    The calls that finish together are yielded together (each yield is a message
    on the stream, and costs about as much as a small request). With `reports`,
    each call is `fn(*args, report=...)`, and what it reports goes out as
    `(index, Progress(value))` pairs, ahead of its result. With `traces` (the
    callers' trace contexts, `MicroBatcher`), a traced call runs in a span named
    for this replica's tier and `fn`.
    """
    ready: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    def reporter(index: int) -> Callable[[Any], None]:
        return lambda value: ready.put_nowait((index, Progress(value)))

    def finished(index: int, task: asyncio.Future[Any]) -> None:
        ready.put_nowait((index, asyncio.CancelledError() if task.cancelled() else task.exception() or task.result()))

    name = getattr(fn, "__name__", "call")
    tasks = []
    for index, args in enumerate(calls):
        call = functools.partial(fn, report=reporter(index)) if reports else fn
        found = traces[index] if traces is not None else None
        task = asyncio.ensure_future(_traced(call, name, args, found, len(calls)) if found else call(*args))
        task.add_done_callback(functools.partial(finished, index))
        tasks.append(task)
    left = len(tasks)
    try:
        while left:
            chunk = [await ready.get()]
            while not ready.empty():
                chunk.append(ready.get_nowait())
            left -= sum(not isinstance(result, Progress) for _, result in chunk)
            yield chunk
    finally:
        for task in tasks:
            task.cancel()


async def _traced(
    fn: Callable[..., Awaitable[Any]], name: str, args: tuple[Any, ...], found: tracing.Carrier, size: int
) -> Any:
    """`fn(*args)` in the replica's span of the call (`<tier>.<name>`, with the micro-batch's size)."""
    with tracing.served(found, name, {"gym_serve.batch_size": size}) as current:
        result = await fn(*args)
        tracing.result_attributes(current, result)
        return result


class BatchedResponses:
    """Base of every Model deployment: the Agent sends its `responses` calls in micro-batches to `responses_batch`.

    A subclass defines `responses(request, session)`; each call of a batch runs
    concurrently and its result streams back as soon as it is ready.
    """

    responses: Callable[[dict[str, Any], str | None], Awaitable[dict[str, Any]]]

    async def affinity_buckets(self) -> int | None:
        """Session buckets a caller splits its batches into for session affinity; None: this tier wants none.

        A tier that benefits from seeing all calls of a rollout (a prefix cache) returns
        the number of buckets and routes with `gym_serve.calls.routing.SessionRouter`.
        """
        return None

    async def responses_batch(
        self, calls: list[tuple[dict[str, Any], str | None]], traces: list[tracing.Carrier | None] | None = None
    ) -> AsyncIterator[list[tuple[int, Any]]]:
        async for item in stream_batch(self.responses, calls, traces):
            yield item
