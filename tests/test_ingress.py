"""The HTTP ingress on a real Serve HTTP proxy: NeMo Gym's /run, streamed rollouts, the OpenAI endpoints, limits."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import ray
from ray import serve

from deployments.app import build_app
from deployments.ingress import build_ingress
from gym_serve.client import GymClient, GymClientError
from gym_serve.config import AppArgs

from .conftest import example_rows

pytestmark = pytest.mark.serve

TOKEN = "tok-ingress-test-31337"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN  # replicas inherit it; it is in no config
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for env in ("example_single_tool_call", "example_session_state"):
        serve.run(build_app(AppArgs.model_validate({"environment": {"name": env}})), name=env, route_prefix=None)
    serve.run(build_ingress({"agents": ["example_single_tool_call", "example_session_state"],
                             "default_agent": "example_single_tool_call", "model_app": "example_single_tool_call",
                             "max_in_flight": 600, "max_body_bytes": 200_000}), name="ingress", route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()
    del os.environ["GYM_SERVE_TOKEN"]


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as session:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with session.post(url, data=data, headers={**AUTH, **(headers or {})}) as response:
            text = await response.text()
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = text
            return response.status, parsed, dict(response.headers)


async def test_run_takes_a_nemo_gym_row(base_url: str) -> None:
    row = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 3, "_ng_rollout_index": 0}
    status, rollout, _ = await post(f"{base_url}/run", row)
    assert status == 200, rollout
    assert rollout["reward"] == 1.0 and rollout["_ng_task_index"] == 3
    session_row = {**example_rows("example_session_state")[0], "agent_ref": {"name": "example_session_state"}}
    status, rollout, _ = await post(f"{base_url}/run", session_row)
    assert status == 200 and rollout["reward"] == 1.0


async def test_client_streams_500_rollouts_every_key_once(base_url: str) -> None:
    rows = [example_rows("example_single_tool_call")[i % 5] for i in range(100)]
    async with GymClient(base_url, token=TOKEN, max_in_flight=64) as client:
        single = await client.run({**rows[0], "_ng_task_index": 0, "_ng_rollout_index": 0})
        results = [r async for r in client.rollouts(rows, num_repeats=5, batch_size=8)]
    assert single["reward"] == 1.0
    keys = sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in results)
    assert keys == [(t, k) for t in range(100) for k in range(5)]
    assert all(r["reward"] == 1.0 for r in results)


async def test_groups_come_back_together(base_url: str) -> None:
    rows = example_rows("example_single_tool_call")[:3]
    async with aiohttp.ClientSession(headers=AUTH) as session:
        async with session.post(f"{base_url}/v1/rollouts", json={"rows": rows, "num_repeats": 4, "group_size": 4,
                                                                  "temperature": 0.5}) as response:
            assert response.status == 200
            lines = [json.loads(line) async for line in response.content if line.strip()]
    assert len(lines) == 12
    for start in range(0, 12, 4):  # each group of 4 is one task's, contiguous in the stream
        assert len({r["_ng_task_index"] for r in lines[start:start + 4]}) == 1
    assert all(r["responses_create_params"]["temperature"] == 0.5 for r in lines)


def test_the_official_openai_client_works_unchanged(base_url: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key=TOKEN)
    prompt = example_rows("example_single_tool_call")[0]["responses_create_params"]
    messages = [{"role": "developer", "content": prompt["input"][0]["content"]},
                {"role": "user", "content": "what's it like in sf?"}]
    chat = client.chat.completions.create(
        model="replay", messages=messages,
        tools=[{"type": "function", "function": {k: v for k, v in prompt["tools"][0].items() if k != "type"}}])
    assert chat.choices[0].message.tool_calls[0].function.name == "get_weather"
    response = client.responses.create(model="replay", input=prompt["input"], tools=prompt["tools"])
    assert response.output[0].type == "function_call" and response.output[0].name == "get_weather"


async def test_bad_requests_get_clear_4xx_and_the_server_keeps_serving(base_url: str) -> None:
    status, body, _ = await post(f"{base_url}/run", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]
    status, body, _ = await post(f"{base_url}/run", {"responses_create_params": {"input": "x"},
                                                     "agent_ref": {"name": "nobody"}})
    assert status == 404 and "unknown agent `nobody`" in body["error"]
    status, body, _ = await post(f"{base_url}/v1/rollouts", {"rows": [], "num_repeats": 1})
    assert status == 400 and "rows" in body["error"]
    status, body, _ = await post(f"{base_url}/run", {"pad": "x" * 300_000})
    assert status == 413
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        status, body, _ = await post(f"{base_url}/run", example_rows("example_single_tool_call")[0], headers)
        assert status == 401 and TOKEN not in json.dumps(body)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base_url}/healthz") as response:
            assert response.status == 200, "health needs no token"
        async with session.get(f"{base_url}/v1/environments", headers=AUTH) as response:
            listing = await response.json()
    assert listing["agents"] == ["example_single_tool_call", "example_session_state"]
    assert listing["applications"]["example_session_state"]["deployments"]["Environment"]["replicas"]
    assert TOKEN not in json.dumps(listing)
    status, rollout, _ = await post(f"{base_url}/run", example_rows("example_single_tool_call")[1])
    assert status == 200 and rollout["reward"] == 1.0


async def test_saturation_is_a_429_with_retry_after(base_url: str) -> None:
    rows = example_rows("example_single_tool_call")
    status, body, headers = await post(f"{base_url}/v1/rollouts", {"rows": rows, "num_repeats": 200})
    assert status == 429 and headers.get("Retry-After") == "1" and "saturated" in body["error"]
    async with GymClient(base_url, token=TOKEN) as client:
        with pytest.raises(GymClientError) as info:
            await client.run({"responses_create_params": {"input": "x"}, "agent_ref": {"name": "nobody"}})
    assert info.value.status == 404


def test_the_client_does_not_import_ray() -> None:
    code = ("import sys; sys.modules['ray'] = None; import gym_serve.client; "
            "assert 'ray' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

