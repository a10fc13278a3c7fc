"""A Python client for the gym-serve HTTP ingress: no Ray, only `aiohttp` and `pydantic`.

    async with GymClient("http://127.0.0.1:8000", token=...) as client:
        rollout = await client.run(row)
        async for result in client.rollouts(rows, num_repeats=8, group_size=8):
            ...   # rollout rows (or failure rows with `_ng_failure_class`) as they finish

A trainer outside the Ray cluster pushes its weights the same way (the
ingress needs a bearer token for that):

    async with GymClient("http://127.0.0.1:8000", token=...) as client:
        await client.push_weights(version=3, checkpoint="/ckpt/step-3")   # every replica serves it on return
        (await client.weights())["replicas"]                                # {replica id: version}

Requests that meet 429 or a 5xx are retried with exponential backoff (honouring
`Retry-After`), and at most `max_in_flight` requests are open at once.

Every batch `rollouts` sends carries an `idempotency_key`, so when the
connection drops mid-stream the client sends the batch again with the same
key: the ingress replays the rollouts that had finished and runs only the
rest, and the client skips the lines it already yielded (a 409, the ingress
still seeing the old connection, is retried like a 429).

`rollouts` returns the batch, which a trainer also pauses: `await batch.pause()`
stops every request of it at its rollouts' next turn boundaries, and the
iteration then yields each unfinished rollout as a partial (`partial: true`)
and ends; `client.rollouts(partials=...)` continues them later, under the
policy serving then:

    batch = client.rollouts(rows, num_repeats=8, group_size=8)
    async for row in batch:
        ...                       # when it is time for a weight update: await batch.pause()
    await client.push_weights(version, checkpoint)
    async for row in client.rollouts(partials=[r for r in kept if r.get("partial")]):
        ...
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import aiohttp

__all__ = ["ClientBatch", "GymClient", "GymClientError", "run_sync"]


class GymClientError(Exception):
    """The ingress answered with an error that retrying will not fix (4xx other than 429), or retries ran out."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class GymClient:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        max_in_flight: int = 16,
        max_retries: int = 6,
        timeout_s: float = 3600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._max_retries = max_retries
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> GymClient:
        self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def run(self, row: dict[str, Any]) -> dict[str, Any]:
        """One rollout (NeMo Gym's `/run`)."""
        lines = [line async for line in self._post_lines("/run", row)]
        return lines[0]

    async def push_weights(self, version: int, checkpoint: str) -> dict[str, Any]:
        """Make `version`, the safetensors in the folder `checkpoint`, the policy every Model replica serves.

        Answers the update's report once every replica serves it (`gym_serve.models.weights.UpdateReport`).
        Not retried: a refusal (422: the weights do not fit, 409: the version is not new) raises `GymClientError`.
        """
        body = {"version": version, "checkpoint": checkpoint}
        return await self._request("POST", "/v1/weights", body)

    async def weights(self) -> dict[str, Any]:
        """The policy's current version and the version each running replica serves."""
        return await self._request("GET", "/v1/weights")

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._session is None:
            raise RuntimeError("use `async with GymClient(...)` before sending requests")
        async with self._session.request(method, self.base_url + path, json=body) as response:
            if response.status >= 400:
                raise GymClientError(response.status, await response.text())
            answer: dict[str, Any] = await response.json()
            return answer

    def rollouts(
        self,
        rows: Iterable[dict[str, Any]] = (),
        *,
        partials: Iterable[dict[str, Any]] = (),
        num_repeats: int = 1,
        group_size: int | None = None,
        batch_size: int = 64,
        **options: Any,
    ) -> ClientBatch:
        """Rollouts of `rows` × `num_repeats` and of the `partials` continued, yielded as they complete; rows go
        out in requests of `batch_size`.

        With `group_size`, rollouts come in groups of one task's (of one agent) rollouts, `group_size` at a
        time, each group's rows one after the other even while several requests stream at once; `options` are
        the other fields of `POST /v1/rollouts` (sampling, `group_policy`, `max_policy_lag`, ...).
        """
        bodies = [
            {"rows": batch, "num_repeats": repeats, "group_size": group_size, **options}
            for batch, repeats in _batches(rows, num_repeats, batch_size)
        ]
        kept = list(partials)
        bodies += [
            {"partials": kept[i : i + batch_size], "group_size": group_size, **options}
            for i in range(0, len(kept), batch_size)
        ]
        return ClientBatch(self, bodies, group_size)

    async def pause(self, batch_id: str) -> bool:
        """Stop the running request `batch_id` at its next turn boundaries; False if the ingress runs none."""
        try:
            await self._request("POST", f"/v1/rollouts/{batch_id}/pause")
        except GymClientError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def _post_lines(
        self,
        path: str,
        body: dict[str, Any],
        opened: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """POST with retries; yields the JSON lines of the answer (one for /run, many for /v1/rollouts).

        With an `idempotency_key` in the body, a dropped connection and a 409 are retried too. `opened` hears
        that an answer began streaming.
        """
        if self._session is None:
            raise RuntimeError("use `async with GymClient(...)` before sending requests")
        idempotent = body.get("idempotency_key") is not None
        for attempt in range(self._max_retries + 1):
            try:
                async with self._slots, self._session.post(self.base_url + path, json=body) as response:
                    retry = response.status == 429 or (response.status == 409 and idempotent)
                    if retry or response.status >= 500 and path != "/run":
                        if attempt == self._max_retries:
                            raise GymClientError(response.status, await response.text())
                        retry_after = float(response.headers.get("Retry-After", 0) or 0)
                        await asyncio.sleep(max(retry_after, 0.1 * 2**attempt) * random.uniform(1.0, 1.5))
                        continue
                    if response.status >= 400 and not (path == "/run" and response.status == 500):
                        raise GymClientError(response.status, await response.text())
                    if opened is not None:
                        await opened(body)
                    async for raw in response.content:
                        if raw.strip():
                            yield json.loads(raw)
                    return
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                if not idempotent or attempt == self._max_retries:
                    raise
                await asyncio.sleep(0.1 * 2**attempt * random.uniform(1.0, 1.5))


class ClientBatch:
    """The requests of one `GymClient.rollouts` call: `async for row in batch`, and `await batch.pause()`."""

    def __init__(self, client: GymClient, bodies: list[dict[str, Any]], group_size: int | None) -> None:
        self._client = client
        self._bodies = bodies
        self._group_size = group_size
        self._open: set[str] = set()
        self.paused = False

    async def pause(self) -> int:
        """Stop every request of the batch at its rollouts' next turn boundaries (those sent later at once); the
        iteration then yields the unfinished rollouts as partials and ends. Returns the requests paused."""
        self.paused = True
        paused = await asyncio.gather(*(self._client.pause(batch_id) for batch_id in list(self._open)))
        return sum(paused)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._rows()

    async def _rows(self) -> AsyncIterator[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        senders = [asyncio.ensure_future(self._send(body, queue)) for body in self._bodies]
        done = asyncio.ensure_future(asyncio.gather(*senders, return_exceptions=True))
        done.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            for sender in senders:
                sender.cancel()

    async def _send(self, body: dict[str, Any], queue: asyncio.Queue[Any]) -> None:
        key = uuid.uuid4().hex
        body = {**body, "idempotency_key": key, "batch_id": key}
        seen: set[tuple[Any, Any, Any]] = set()  # a re-sent batch replays lines this one already yielded
        groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        self._open.add(key)
        try:
            async for result in self._client._post_lines("/v1/rollouts", body, opened=self._opened):
                task = ((result.get("agent_ref") or {}).get("name"), result.get("_ng_task_index"))
                index = (*task, result.get("_ng_rollout_index"))
                if index in seen:
                    continue
                seen.add(index)
                if self._group_size is None or result.get("partial") or result.get("straggler"):
                    queue.put_nowait(result)
                    continue
                group = groups.setdefault(task, [])
                group.append(result)
                if len(group) == self._group_size:  # the whole group at once: no other request's line between
                    for member in groups.pop(task):
                        queue.put_nowait(member)
            for group in groups.values():  # the last, smaller groups (num_repeats not a multiple)
                for member in group:
                    queue.put_nowait(member)
        except BaseException as e:  # surfaced to the reader
            queue.put_nowait(e)
        finally:
            self._open.discard(key)

    async def _opened(self, body: dict[str, Any]) -> None:
        """A request's answer began: one sent after the batch was paused is paused at once."""
        if self.paused:
            await self._client.pause(body["batch_id"])


def _batches(rows: Iterable[dict[str, Any]], num_repeats: int, size: int) -> list[tuple[list[dict[str, Any]], int]]:
    """The requests for `rows` × `num_repeats`: (rows, repeats each), with NeMo Gym's task numbering.

    Identical rows are one task (numbered in order of first appearance, unless a
    row has its own `_ng_task_index`): a row that appears `n` times is sent once,
    with `n × num_repeats` rollouts, so its rollouts form one group.
    """
    tasks: dict[str, tuple[dict[str, Any], int]] = {}
    for row in rows:
        key = json.dumps(row, sort_keys=True)
        numbered, count = tasks.get(key, ({"_ng_task_index": len(tasks), **row}, 0))
        tasks[key] = (numbered, count + 1)
    by_count: dict[int, list[dict[str, Any]]] = {}
    for numbered, count in tasks.values():
        by_count.setdefault(count, []).append(numbered)
    return [
        (same[i : i + size], count * num_repeats)
        for count, same in by_count.items()
        for i in range(0, len(same), size)
    ]


def run_sync(base_url: str, row: dict[str, Any], **options: Any) -> dict[str, Any]:
    """`GymClient.run` for code without an event loop."""

    async def once() -> dict[str, Any]:
        async with GymClient(base_url, **options) as client:
            return await client.run(row)

    return asyncio.run(once())
