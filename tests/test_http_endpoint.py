"""The HTTP-backed model tiers' client against a real aiohttp server that misbehaves on purpose.

Each failure a model server can show ends as the exception whose kind names it, retried where another try can
help: a body that is not JSON and a 500 are `model_error`, a hang past the timeout `transport_timeout`, a refused
connection `transport_unreachable`; a 429 waits out its `Retry-After`. The key never shows in an error.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gym_serve.errors import FailureKind, ModelError, failure_kind
from gym_serve.models.http_endpoint import HTTPEndpoint

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the tests and the module's server share one loop

KEY = "sk-endpoint-test-123456"


class Misbehaving:
    """Routes that answer well, badly, late or not at all; counts the requests each received."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.transports: set[int] = set()
        self.in_flight = 0
        self.most_in_flight = 0

    def app(self) -> web.Application:
        app = web.Application()
        for path, handler in {
            "/ok": self.ok,
            "/not-json": self.not_json,
            "/error": self.error,
            "/error-once": self.error_once,
            "/busy-once": self.busy_once,
            "/hang": self.hang,
            "/unauthorized": self.unauthorized,
            "/slow": self.slow,
        }.items():
            app.router.add_route("*", path, handler)
        return app

    def _count(self, request: web.Request) -> int:
        self.seen[request.path] += 1
        self.transports.add(id(request.transport))
        return self.seen[request.path]

    async def ok(self, request: web.Request) -> web.Response:
        self._count(request)
        body = await request.json() if request.can_read_body else None
        return web.json_response({"echo": body, "auth": request.headers.get("Authorization") == f"Bearer {KEY}"})

    async def not_json(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.Response(text='{"output": [', content_type="application/json")

    async def error(self, request: web.Request) -> web.Response:
        self._count(request)  # a server that quotes the key it was sent, as some do
        return web.json_response({"error": f"boom, key was {request.headers.get('Authorization')}"}, status=500)

    async def error_once(self, request: web.Request) -> web.Response:
        if self._count(request) == 1:
            return web.json_response({"error": "overloaded"}, status=503)
        return web.json_response({"fine": True})

    async def busy_once(self, request: web.Request) -> web.Response:
        if self._count(request) == 1:
            return web.json_response({"error": "rate limited"}, status=429, headers={"Retry-After": "1"})
        return web.json_response({"fine": True})

    async def hang(self, request: web.Request) -> web.Response:
        self._count(request)
        await asyncio.sleep(30)
        return web.json_response({})

    async def unauthorized(self, request: web.Request) -> web.Response:
        self._count(request)
        return web.json_response({"error": "Incorrect API key provided"}, status=401)

    async def slow(self, request: web.Request) -> web.Response:
        self._count(request)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        return web.json_response({})


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[tuple[Misbehaving, str]]:
    fake = Misbehaving()
    runner = web.AppRunner(fake.app(), shutdown_timeout=0.5)  # do not wait for the hanging handler
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield fake, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture(scope="module")
async def endpoint(server: tuple[Misbehaving, str]) -> AsyncIterator[HTTPEndpoint]:
    client = HTTPEndpoint(server[1], api_key=KEY, timeout_s=0.5, max_retries=2, backoff_base_s=0.01)
    yield client
    await client.close()


def fresh(server: tuple[Misbehaving, str]) -> Misbehaving:
    server[0].seen.clear()
    server[0].transports.clear()
    return server[0]


async def test_answers_are_plain_dicts_over_one_kept_alive_connection(
    server: tuple[Misbehaving, str], endpoint: HTTPEndpoint
) -> None:
    fake = fresh(server)
    for i in range(5):
        answer = await endpoint.post("/ok", {"n": i})
        assert answer == {"echo": {"n": i}, "auth": True}
    assert fake.seen["/ok"] == 5 and len(fake.transports) == 1, "one pooled connection, reused"


async def test_a_body_that_is_not_json_is_a_model_error_without_retries(
    server: tuple[Misbehaving, str], endpoint: HTTPEndpoint
) -> None:
    fake = fresh(server)
    with pytest.raises(ModelError, match="not JSON") as info:
        await endpoint.post("/not-json", {})
    assert failure_kind(info.value) is FailureKind.MODEL_ERROR
    assert fake.seen["/not-json"] == 1


async def test_a_5xx_is_retried_then_a_model_error_that_hides_the_key(
    server: tuple[Misbehaving, str], endpoint: HTTPEndpoint
) -> None:
    fake = fresh(server)
    with pytest.raises(ModelError, match="HTTP 500") as info:
        await endpoint.post("/error", {})
    assert failure_kind(info.value) is FailureKind.MODEL_ERROR
    assert fake.seen["/error"] == 3, "first try + max_retries"
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert await endpoint.post("/error-once", {}) == {"fine": True}
    assert fake.seen["/error-once"] == 2


async def test_a_429_waits_out_its_retry_after(server: tuple[Misbehaving, str], endpoint: HTTPEndpoint) -> None:
    fake = fresh(server)
    started = time.perf_counter()
    assert await endpoint.post("/busy-once", {}) == {"fine": True}
    assert time.perf_counter() - started >= 0.95, "Retry-After: 1 was honoured (the backoff alone is ~10 ms)"
    assert fake.seen["/busy-once"] == 2


async def test_a_hang_past_the_timeout_is_retried_then_a_transport_timeout(
    server: tuple[Misbehaving, str], endpoint: HTTPEndpoint
) -> None:
    fake = fresh(server)
    with pytest.raises(ModelError) as info:
        await endpoint.post("/hang", {})
    assert failure_kind(info.value) is FailureKind.TRANSPORT_TIMEOUT
    assert fake.seen["/hang"] == 3


async def test_a_refused_connection_is_retried_then_transport_unreachable() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = HTTPEndpoint(f"http://127.0.0.1:{port}", api_key=KEY, max_retries=2, backoff_base_s=0.1)
    started = time.perf_counter()
    with pytest.raises(ModelError) as info:
        await client.post("/v1/responses", {})
    await client.close()
    assert failure_kind(info.value) is FailureKind.TRANSPORT_UNREACHABLE
    assert time.perf_counter() - started >= 0.05 + 0.1, "two backoffs waited (each at least half its step)"
    assert KEY not in str(info.value)


async def test_a_client_error_is_not_retried(server: tuple[Misbehaving, str], endpoint: HTTPEndpoint) -> None:
    fake = fresh(server)
    with pytest.raises(ModelError, match="HTTP 401") as info:
        await endpoint.post("/unauthorized", {})
    assert failure_kind(info.value) is FailureKind.MODEL_ERROR
    assert fake.seen["/unauthorized"] == 1


async def test_calls_in_flight_are_bounded_per_client(server: tuple[Misbehaving, str]) -> None:
    fake = fresh(server)
    fake.most_in_flight = 0
    client = HTTPEndpoint(server[1], max_concurrency=3)
    await asyncio.gather(*(client.post("/slow", {}) for _ in range(12)))
    await client.close()
    assert fake.seen["/slow"] == 12 and fake.most_in_flight == 3


async def test_the_key_is_not_in_the_clients_repr() -> None:
    assert KEY not in repr(HTTPEndpoint("http://127.0.0.1:1", api_key=KEY))
