"""The OpenAI-compatible Model tier against real OpenAI-style HTTP servers on loopback.

The server (`tests.fake_openai`: aiohttp, in a thread) speaks `/v1/chat/completions` and `/v1/responses`,
checks the bearer key here, and fails its first request with a 503, so the client's retries are exercised
for real; under `/broken/v1` it answers with a body that is not JSON, under `/barrier/v1` it answers no call
until 8 are in flight at once.
The instant weather server (`gym_serve.testing.instant_openai_server`, its own process) plays a perfect policy.
(The client's behaviour on every kind of failure, call by call: tests/test_http_endpoint.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import serve

from gym_serve.calls.batching import BatchedResponses
from gym_serve.collect.attempts import RetryPolicy, run_attempts
from gym_serve.deployments.app import build_app
from gym_serve.deployments.openai_model import OpenAIModelDeployment
from gym_serve.errors import FailureKind, failure_kind
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows, unique
from gym_serve.testing.instant_openai_server import start_instant_server
from tests.fake_openai import FakeOpenAI, serving

pytestmark = pytest.mark.serve

KEY = "sk-test-9f8e7d6c5b4a"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI(key=KEY, reject_first=True)
    with serving(fake) as base_url:
        yield fake, base_url


@pytest.fixture(scope="module")
def instant() -> Iterator[str]:
    base_url, process = start_instant_server()
    yield base_url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    os.environ["GYM_SERVE_TEST_KEY"] = KEY  # replicas inherit the environment; the key is in no config
    os.environ["GYM_SERVE_WRONG_KEY"] = "sk-wrong-0000"
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    yield
    serve.shutdown()
    ray.shutdown()


def deploy(base_url: str, api: str, key_env: str = "GYM_SERVE_TEST_KEY", max_retries: int = 3) -> tuple[str, Any]:
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
                "max_retries": max_retries,
                "timeout_s": 30,
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
    assert failure_kind(info.value) is FailureKind.MODEL_ERROR and "HTTP 401" in text
    assert "sk-wrong-0000" not in text and KEY not in text
    status = json.dumps(serve.status().to_dict() if hasattr(serve.status(), "to_dict") else str(serve.status()))
    assert "sk-wrong" not in status and KEY not in status
    serve.delete(name)


def test_the_key_is_a_secret_in_config() -> None:
    args = AppArgs.model_validate({"model": {"kind": "openai", "model": "m", "api_key": KEY}})
    assert KEY not in repr(args) and KEY not in args.model_dump_json()


def row_of(index: int) -> dict[str, Any]:
    rows = example_rows("example_single_tool_call")
    return {**rows[index % len(rows)], "_ng_task_index": index, "_ng_rollout_index": 0}


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_the_instant_weather_server_plays_a_perfect_policy(cluster: None, instant: str, api: str) -> None:
    name, handle = deploy(instant, api)
    rows = [row_of(i) for i in range(len(example_rows("example_single_tool_call")))]
    rollouts = await asyncio.gather(*(handle.run.remote(row) for row in rows))
    assert [r["reward"] for r in rollouts] == [1.0] * len(rows)
    calls = [sum(item["type"] == "function_call" for item in r["response"]["output"]) for r in rollouts]
    assert calls[:5] == [1] * 5 and calls[5] == 0, "a city named: one get_weather call; none named: it asks"
    serve.delete(name)


async def test_calls_run_concurrently_inside_one_model_replica(cluster: None, server: tuple[FakeOpenAI, str]) -> None:
    """Every Model kind takes micro-batches (`responses_batch`) and runs their calls at once.

    The barrier route answers no call until 8 are in flight: with calls run one by one it would never answer.
    """
    fake, base_url = server
    assert issubclass(OpenAIModelDeployment.func_or_class, BatchedResponses)
    name, handle = deploy(base_url.replace("/v1", "/barrier/v1"), "responses")
    rollouts = await asyncio.gather(*(handle.run.remote(row_of(i)) for i in range(FakeOpenAI.BARRIER)))
    assert fake.most_in_flight == FakeOpenAI.BARRIER
    assert all(r["reward"] == 1.0 for r in rollouts)
    serve.delete(name)


@pytest.mark.parametrize(
    ("where", "kind"),
    [("broken", FailureKind.MODEL_ERROR), ("refused", FailureKind.TRANSPORT_UNREACHABLE)],
)
async def test_a_failing_endpoint_gives_failure_rows_of_its_kind(
    cluster: None, server: tuple[FakeOpenAI, str], where: str, kind: FailureKind
) -> None:
    """Through the tier and the one retry path (`run_attempts`), as the driver and the ingress run rollouts."""
    _, base_url = server
    if where == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base_url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    else:
        base_url = base_url.replace("/v1", "/broken/v1")
    name, handle = deploy(base_url, "responses", max_retries=1)
    row = row_of(0)
    outcome = await run_attempts(
        lambda: handle.run.remote(row), row, RetryPolicy(max_attempts=2, backoff_base_s=0.01), random.Random(0)
    )
    assert outcome.kind is kind and outcome.attempts == 2
    assert outcome.row["_ng_failure_class"] == kind.value and outcome.row["mask_sample"] is True
    serve.delete(name)
