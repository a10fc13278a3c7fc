"""The OpenAI-compatible Model tier against a real OpenAI-style HTTP server on loopback.

The server (`tests.fake_openai`: aiohttp, in a thread) speaks `/v1/chat/completions` and `/v1/responses`,
checks the bearer key here, and fails its first request with a 503, so the client's retries are exercised
for real.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import serve

from gym_serve.deployments.app import build_app
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows, unique
from tests.fake_openai import FakeOpenAI, serving

pytestmark = pytest.mark.serve

KEY = "sk-test-9f8e7d6c5b4a"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI(key=KEY, reject_first=True)
    with serving(fake) as base_url:
        yield fake, base_url


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
