"""The OpenAI-compatible Model tier against a real OpenAI-style HTTP server on loopback.

The server (aiohttp, in a thread) speaks `/v1/chat/completions` and `/v1/responses`, checks the bearer key,
and fails its first request with a 503, so the client's retries are exercised for real.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from aiohttp import web
from ray import serve

from gym_serve.deployments.app import build_app
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows, unique

pytestmark = pytest.mark.serve

KEY = "sk-test-9f8e7d6c5b4a"


def weather_answer(tool_output: str) -> str:
    return f"Here you go: {json.loads(tool_output)['weather_description']}"


class FakeOpenAI:
    """A minimal, real HTTP server with OpenAI's request and response shapes."""

    def __init__(self) -> None:
        self.requests = 0
        self.rejected_once = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/responses", self.responses)
        return app

    def _guard(self, request: web.Request) -> web.Response | None:
        self.requests += 1
        if request.headers.get("Authorization") != f"Bearer {KEY}":
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
        if tool_messages:
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

    async def responses(self, request: web.Request) -> web.Response:
        if (refused := self._guard(request)) is not None:
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


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(fake.app())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{port}/v1"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.run_until_complete(runner.cleanup())  # left open, the loop and its sockets surface in a later test's GC
    loop.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    os.environ["GYM_SERVE_TEST_KEY"] = KEY  # replicas inherit the environment; the key is in no config
    os.environ["GYM_SERVE_WRONG_KEY"] = "sk-wrong-0000"
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    yield
    serve.shutdown()
    ray.shutdown()


def deploy(base_url: str, api: str, key_env: str = "GYM_SERVE_TEST_KEY") -> tuple[str, Any]:
    name = unique(f"openai-{api}")
    args = AppArgs.model_validate(
        {
            "environment": {"name": "example_single_tool_call"},
            "model": {
                "kind": "openai",
                "base_url": base_url,
                "model": "gpt-test",
                "api": api,
                "api_key_env": key_env,
                "max_retries": 3,
                "timeout_s": 10,
            },
        }
    )
    return name, serve.run(build_app(args), name=name, route_prefix=None)


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_rollout_through_an_openai_compatible_endpoint(
    cluster: None, server: tuple[FakeOpenAI, str], api: str
) -> None:
    fake, base_url = server
    name, handle = deploy(base_url, api)
    row = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 0, "_ng_rollout_index": 0}
    rollout = await handle.run.remote(row)
    kinds = [item["type"] for item in rollout["response"]["output"]]
    assert kinds == ["function_call", "function_call_output", "message"]
    assert rollout["reward"] == 1.0
    assert rollout["response"]["usage"]["input_tokens"] == 40
    assert KEY not in json.dumps(rollout)
    assert fake.rejected_once, "the first request got a 503 and was retried"
    serve.delete(name)


async def test_a_rejected_key_fails_as_model_error_without_leaking_it(
    cluster: None, server: tuple[FakeOpenAI, str]
) -> None:
    _, base_url = server
    name, handle = deploy(base_url, "chat", key_env="GYM_SERVE_WRONG_KEY")
    row = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 0, "_ng_rollout_index": 0}
    with pytest.raises(Exception) as info:
        await handle.run.remote(row)
    text = str(info.value)
    assert "model_error" in repr(getattr(info.value, "kind", "")) or "AuthenticationError" in text
    assert "sk-wrong-0000" not in text and KEY not in text
    status = json.dumps(serve.status().to_dict() if hasattr(serve.status(), "to_dict") else str(serve.status()))
    assert "sk-wrong" not in status and KEY not in status
    serve.delete(name)


def test_the_key_is_a_secret_in_config() -> None:
    args = AppArgs.model_validate({"model": {"kind": "openai", "model": "m", "api_key": KEY}})
    assert KEY not in repr(args) and KEY not in args.model_dump_json()
