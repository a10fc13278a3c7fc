"""A stand-in for an OpenAI-compatible endpoint (the OpenAI API, `vllm serve`): a real HTTP server on loopback.

It speaks `/v1/chat/completions` and `/v1/responses` and answers at once, so tests of the OpenAI model tier,
and of documented commands that need a real model server, run without a key, a network or a GPU.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

__all__ = ["FakeOpenAI", "serving"]


def weather_answer(tool_output: str) -> str:
    return f"Here you go: {json.loads(tool_output)['weather_description']}"


class FakeOpenAI:
    """A minimal, real HTTP server with OpenAI's request and response shapes, playing the weather task.

    It asks for `get_weather` first and answers with the tool's report once it has one, so a weather
    rollout through it scores 1.0. With `key`, other bearer keys get a 401; with `reject_first`, the
    first request gets a 503 (a client's retry is then exercised for real). Under `/broken/v1` it
    answers with a body that is not JSON; under `/barrier/v1` it answers no call until `BARRIER` are
    in flight at once (only concurrent calls get through).
    """

    BARRIER = 8

    def __init__(self, *, key: str | None = None, reject_first: bool = False, says: str | None = None) -> None:
        """`says`: Chat Completions answer every conversation with this text (a judge's verdict, say) instead of
        playing the weather episode."""
        self.key, self.says = key, says
        self.requests = 0
        self.rejected_once = not reject_first
        self.in_flight = 0
        self.most_in_flight = 0
        self.all_in: asyncio.Event | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/broken/v1/responses", self.broken)
        app.router.add_post("/barrier/v1/responses", self.barrier)
        return app

    async def broken(self, request: web.Request) -> web.Response:
        return web.Response(text='{"id": "resp_1", "output": [{"type": "mess', content_type="application/json")

    async def barrier(self, request: web.Request) -> web.Response:
        if self.all_in is None:
            self.all_in = asyncio.Event()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight >= self.BARRIER:
            self.all_in.set()
        try:
            await asyncio.wait_for(self.all_in.wait(), 20)
        except TimeoutError:
            return web.json_response({"error": {"message": "the calls did not arrive together"}}, status=400)
        finally:
            self.in_flight -= 1
        return await self.responses(request, check=False)

    def _guard(self, request: web.Request) -> web.Response | None:
        self.requests += 1
        if self.key is not None and request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": {"message": "Incorrect API key provided"}}, status=401)
        if not self.rejected_once:
            self.rejected_once = True
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        return None

    async def chat(self, request: web.Request) -> web.Response:
        if (refused := self._guard(request)) is not None:
            return refused
        body = await request.json()
        tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
        if self.says is not None:
            message, finish = {"role": "assistant", "content": self.says}, "stop"
        elif tool_messages:
            message = {"role": "assistant", "content": weather_answer(tool_messages[-1]["content"])}
            finish = "stop"
        else:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "San Francisco"})},
            }
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
            }
        )

    async def responses(self, request: web.Request, check: bool = True) -> web.Response:
        if check and (refused := self._guard(request)) is not None:
            return refused
        body = await request.json()
        outputs = [i for i in body["input"] if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            item = {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": weather_answer(outputs[-1]["output"]), "annotations": []}],
            }
        else:
            item = {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": json.dumps({"city": "San Francisco"}),
                "status": "completed",
            }
        return web.json_response(
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 1,
                "model": body["model"],
                "status": "completed",
                "output": [item],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 20,
                    "output_tokens": 5,
                    "total_tokens": 25,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        )


@contextmanager
def serving(fake: FakeOpenAI, port: int | None = None) -> Iterator[str]:
    """Serve `fake` on loopback (a free port unless given) from a thread; yields its base URL (`.../v1`)."""
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(fake.app(), shutdown_timeout=0.5)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.run_until_complete(runner.cleanup())
        loop.close()
