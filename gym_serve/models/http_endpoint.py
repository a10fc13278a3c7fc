"""One replica's connection to a model server over HTTP: the hot path of every HTTP-backed Model tier.

A model replica sends every call of its micro-batches here, so each call's own
cost is the tier's cost. Profiled under load (py-spy, the weather task at 256 in
flight against an instant server), the official `openai` client spent about
6 ms of CPU per call, two thirds of the Model replica's time: turning the
request into its typed parameters (`_transform`, a quarter), httpx/httpcore's
pool bookkeeping (a quarter: it walks every connection on each request) and
building response objects. This client does only what the wire needs: one
pooled keep-alive `aiohttp` session, bodies as bytes in and plain dicts out
(orjson), a semaphore bounding the calls in flight.

Retries with exponential backoff and jitter: 429 (waiting at least its
`Retry-After`), 5xx, refused or dropped connections, timeouts. What is left after
the retries is an exception whose type names the failure kind
(`gym_serve.errors`): `ModelUnreachableError` (transport_unreachable),
`ModelTimeoutError` (transport_timeout), `ModelError` (model_error: other
statuses, a body that is not JSON). The key goes in a header and nowhere else:
no message quotes it, and a server's error text is redacted of it.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from typing import Any

import aiohttp
import orjson

from gym_serve.errors import ModelError, ModelTimeoutError, ModelUnreachableError
from gym_serve.wire.chat import chat_response_to_responses

__all__ = ["HTTPEndpoint", "responses_over_chat"]

_RETRY_AFTER_CAP_S = 60.0
"""The longest `Retry-After` honoured; a server asking for more gets this (the rollout's deadline still holds)."""


class HTTPEndpoint:
    """`await endpoint.post(path, body)` → the JSON answer as a dict, retried as the module says.

    Create it anywhere; its session opens on first use, in the event loop that uses it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 5,
        max_concurrency: int = 64,
        backoff_base_s: float = 0.25,
        backoff_cap_s: float = 8.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = api_key or None
        self._headers = {"Content-Type": "application/json"}
        if self._key:
            self._headers["Authorization"] = f"Bearer {self._key}"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._max_concurrency = max_concurrency
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._slots: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None
        self._rng = random.Random()

    def __repr__(self) -> str:  # no key
        return f"HTTPEndpoint({self.base_url!r}, timeout_s={self.timeout_s}, max_retries={self.max_retries})"

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` as JSON to `base_url + path`; the answer's JSON object."""
        return await self._call("POST", path, orjson.dumps(body))

    async def get(self, path: str) -> dict[str, Any]:
        """GET `base_url + path`; the answer's JSON object (start-up probes)."""
        return await self._call("GET", path, None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
        url = self.base_url + path
        for attempt in range(self.max_retries + 1):
            wait = None
            try:
                status, payload, retry_after = await self._send(method, url, data)
            except TimeoutError:
                error: ModelError = ModelTimeoutError(f"{method} {url}: no answer within {self.timeout_s} s")
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                error = ModelUnreachableError(f"{method} {url}: {type(e).__name__}: {self._redact(str(e))}")
            else:
                if status == 200:
                    return self._parse(method, url, payload)
                error = ModelError(f"{method} {url}: HTTP {status}: {self._redact(_snippet(payload))}")
                if status != 429 and status < 500:
                    raise error  # the request itself is wrong (400, 401, 404...): another try says the same
                wait = retry_after
            if attempt == self.max_retries:
                raise error
            await asyncio.sleep(max(wait or 0.0, self._backoff_s(attempt)))
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _send(self, method: str, url: str, data: bytes | None) -> tuple[int, bytes, float | None]:
        if self._session is None:
            self._slots = asyncio.Semaphore(self._max_concurrency)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_concurrency, ttl_dns_cache=300),
                headers=self._headers,
                timeout=self._timeout,
                cookie_jar=aiohttp.DummyCookieJar(),  # an API client keeps no cookies (~15 % of its CPU per call)
            )
        assert self._slots is not None
        async with self._slots, self._session.request(method, url, data=data) as response:
            payload = await response.read()
            return response.status, payload, _retry_after(response.headers.get("Retry-After"))

    def _parse(self, method: str, url: str, payload: bytes) -> dict[str, Any]:
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            raise ModelError(
                f"{method} {url}: the answer is not JSON ({e}): {self._redact(_snippet(payload))}"
            ) from None
        if not isinstance(parsed, dict):
            raise ModelError(f"{method} {url}: expected a JSON object, got {type(parsed).__name__}")
        return parsed

    def _backoff_s(self, attempt: int) -> float:
        return self._rng.uniform(0.5, 1.0) * min(self._backoff_cap_s, self._backoff_base_s * 2**attempt)

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text


def _snippet(payload: bytes, limit: int = 300) -> str:
    text = payload[:limit].decode("utf-8", "replace")
    return text + ("…" if len(payload) > limit else "")


def _retry_after(value: str | None) -> float | None:
    """A `Retry-After` header in seconds (it may be a number or an HTTP date), at most `_RETRY_AFTER_CAP_S`."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), _RETRY_AFTER_CAP_S)


async def responses_over_chat(endpoint: HTTPEndpoint, chat: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request (one `gym_serve.wire.chat` made from a Responses request) answered as a
    Responses object: how `kind: openai, api: chat` talks to a server."""
    completion = await endpoint.post("/chat/completions", chat)
    if not completion.get("choices"):
        raise ModelError(f"{endpoint.base_url}/chat/completions: an answer without `choices`")
    return chat_response_to_responses(completion)
