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
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

import aiohttp

__all__ = ["GymClient", "GymClientError", "run_sync"]


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

    async def rollouts(
        self,
        rows: Iterable[dict[str, Any]],
        *,
        num_repeats: int = 1,
        group_size: int | None = None,
        batch_size: int = 64,
        **sampling: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Rollouts of `rows` × `num_repeats`, yielded as they complete; rows go out in batches of `batch_size`.

        With `group_size`, rollouts come in groups of one task's (of one agent) rollouts, `group_size` at a
        time, each group's rows one after the other even while several batches stream at once.
        """
        queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        batches = _batches(rows, num_repeats, batch_size)

        async def send(batch: list[dict[str, Any]], repeats: int) -> None:
            body = {
                "rows": batch,
                "num_repeats": repeats,
                "group_size": group_size,
                "idempotency_key": uuid.uuid4().hex,
                **sampling,
            }
            seen: set[tuple[Any, Any, Any]] = set()  # a re-sent batch replays lines this one already yielded
            groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
            try:
                async for result in self._post_lines("/v1/rollouts", body):
                    task = ((result.get("agent_ref") or {}).get("name"), result.get("_ng_task_index"))
                    key = (*task, result.get("_ng_rollout_index"))
                    if key in seen:
                        continue
                    seen.add(key)
                    if group_size is None:
                        queue.put_nowait(result)
                        continue
                    group = groups.setdefault(task, [])
                    group.append(result)
                    if len(group) == group_size:  # the whole group at once: no other batch's line gets between
                        for member in groups.pop(task):
                            queue.put_nowait(member)
                for group in groups.values():  # the last, smaller groups (num_repeats not a multiple)
                    for member in group:
                        queue.put_nowait(member)
            except BaseException as e:  # surfaced to the reader below
                queue.put_nowait(e)

        senders = [asyncio.ensure_future(send(batch, repeats)) for batch, repeats in batches]
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

    async def _post_lines(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """POST with retries; yields the JSON lines of the answer (one for /run, many for /v1/rollouts).

        With an `idempotency_key` in the body, a dropped connection and a 409 are retried too.
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
                    async for raw in response.content:
                        if raw.strip():
                            yield json.loads(raw)
                    return
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                if not idempotent or attempt == self._max_retries:
                    raise
                await asyncio.sleep(0.1 * 2**attempt * random.uniform(1.0, 1.5))


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
