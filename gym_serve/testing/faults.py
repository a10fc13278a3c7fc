"""Faults a model server injects at set rates: what a chaos soak throws at the model tier's HTTP client.

Each model call draws once from a seeded generator and, with the rates given, is answered with one of:

| kind        | what the client sees                                                   | what it must do            |
|-------------|------------------------------------------------------------------------|----------------------------|
| `http_5xx`  | 500, 502 or 503 with an error body                                     | retry                      |
| `http_429`  | 429 with `Retry-After: 1`                                              | wait that long, retry      |
| `timeout`   | nothing, until long after its timeout                                  | give up the call, retry    |
| `drop`      | the connection closed without an answer                                | retry                      |
| `malformed` | 200 with a body that is not JSON                                       | fail the call (model_error)|
| `slow`      | the right answer, `slow_s` late                                        | wait                       |

Every other call is answered normally. The counts per kind are kept (`Faults.counts`) and served at
`GET /faults`; `PUT /faults` sets new rates (`{"rates": {...}}`), so one server can run quiet, then chaotic.

Example:
    >>> faults = Faults(FaultRates(http_5xx=0.5), seed=7)
    >>> [faults.draw() for _ in range(6)]
    ['http_5xx', 'http_5xx', None, 'http_5xx', None, 'http_5xx']
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["KINDS", "FaultRates", "Faults"]

KINDS = ("http_5xx", "http_429", "timeout", "drop", "malformed", "slow")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FaultRates(BaseModel):
    """The probability of each fault per model call (at most 1 together)."""

    model_config = ConfigDict(extra="forbid")

    http_5xx: float = Field(default=0.0, ge=0, le=1)
    http_429: float = Field(default=0.0, ge=0, le=1)
    timeout: float = Field(default=0.0, ge=0, le=1)
    drop: float = Field(default=0.0, ge=0, le=1)
    malformed: float = Field(default=0.0, ge=0, le=1)
    slow: float = Field(default=0.0, ge=0, le=1)
    slow_s: float = Field(default=0.5, ge=0, description="How late a slow answer is.")
    hang_s: float = Field(default=30.0, ge=0, description="How long a timeout holds the call (past the client's).")

    @model_validator(mode="after")
    def _a_probability(self) -> FaultRates:
        if sum(getattr(self, kind) for kind in KINDS) > 1:
            raise ValueError("the rates add up to more than 1")
        return self


class Faults:
    """The injector: `draw()` picks a call's fault (None: answer normally); `middleware` applies it in aiohttp."""

    def __init__(self, rates: FaultRates | None = None, *, seed: int = 0) -> None:
        self.rates = rates or FaultRates()
        self.counts: Counter[str] = Counter()
        self.calls = 0
        self._rng = random.Random(seed)

    def draw(self) -> str | None:
        self.calls += 1
        roll, edge = self._rng.random(), 0.0
        for kind in KINDS:
            edge += getattr(self.rates, kind)
            if roll < edge:
                self.counts[kind] += 1
                return kind
        return None

    def routes(self, app: web.Application) -> None:
        """`GET /faults` (counts, calls, rates) and `PUT /faults` (new rates) on `app`."""
        app.router.add_get("/faults", self._show)
        app.router.add_put("/faults", self._set)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        fault = self.draw()
        if fault == "http_5xx":
            status = self._rng.choice((500, 502, 503))
            return web.json_response({"error": {"message": "injected server error"}}, status=status)
        if fault == "http_429":
            return web.json_response({"error": {"message": "rate limited"}}, status=429, headers={"Retry-After": "1"})
        if fault == "timeout":
            await asyncio.sleep(self.rates.hang_s)
        elif fault == "drop":
            if request.transport is not None:
                request.transport.abort()  # no answer at all: the client reads a closed connection
            raise web.HTTPInternalServerError()  # never sent: the connection is gone
        elif fault == "malformed":
            return web.Response(body=b'{"id": "resp_x", "output": [', content_type="application/json")
        elif fault == "slow":
            await asyncio.sleep(self.rates.slow_s)
        return await handler(request)

    async def _show(self, request: web.Request) -> web.Response:
        counts = {kind: self.counts[kind] for kind in KINDS}
        return web.json_response({"calls": self.calls, "faults": counts, "rates": self.rates.model_dump()})

    async def _set(self, request: web.Request) -> web.Response:
        self.rates = FaultRates.model_validate((await request.json())["rates"])
        return await self._show(request)
