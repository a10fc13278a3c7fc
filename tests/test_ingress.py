"""The HTTP ingress on a real Serve HTTP proxy: NeMo Gym's /run, streamed rollouts, the OpenAI endpoints, limits,
deadlines, cancellation on disconnect, idempotent re-sends and /metrics."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
from ray import serve

from gym_serve.client import GymClient, GymClientError
from gym_serve.deployments.app import build_app
from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows
from gym_serve.testing.overload import overload

from .fault_parts import build_bump_model, counting_rows

pytestmark = pytest.mark.serve

TOKEN = "tok-ingress-test-31337"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["GYM_SERVE_TOKEN"] = TOKEN  # replicas inherit it; it is in no config
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for env in ("example_single_tool_call", "example_session_state"):
        serve.run(build_app(AppArgs.model_validate({"environment": {"name": env}})), name=env, route_prefix=None)
    serve.run(
        build_ingress(
            {
                "agents": ["example_single_tool_call", "example_session_state"],
                "default_agent": "example_single_tool_call",
                "model_app": "example_single_tool_call",
                "max_in_flight": 600,
                "max_body_bytes": 200_000,
            }
        ),
        name="ingress",
        route_prefix="/",
    )
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
    rows = [{**example_rows("example_single_tool_call")[i % 5], "id": i} for i in range(100)]  # 100 distinct tasks
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
        async with session.post(
            f"{base_url}/v1/rollouts", json={"rows": rows, "num_repeats": 4, "group_size": 4, "temperature": 0.5}
        ) as response:
            assert response.status == 200
            lines = [json.loads(line) async for line in response.content if line.strip()]
    assert len(lines) == 12
    for start in range(0, 12, 4):  # each group of 4 is one task's, contiguous in the stream
        assert len({r["_ng_task_index"] for r in lines[start : start + 4]}) == 1
    assert all(r["responses_create_params"]["temperature"] == 0.5 for r in lines)


def test_the_official_openai_client_works_unchanged(base_url: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key=TOKEN)
    prompt = example_rows("example_single_tool_call")[0]["responses_create_params"]
    messages = [
        {"role": "developer", "content": prompt["input"][0]["content"]},
        {"role": "user", "content": "what's it like in sf?"},
    ]
    chat = client.chat.completions.create(
        model="replay",
        messages=messages,
        tools=[{"type": "function", "function": {k: v for k, v in prompt["tools"][0].items() if k != "type"}}],
    )
    assert chat.choices[0].message.tool_calls[0].function.name == "get_weather"
    response = client.responses.create(model="replay", input=prompt["input"], tools=prompt["tools"])
    assert response.output[0].type == "function_call" and response.output[0].name == "get_weather"


async def test_bad_requests_get_clear_4xx_and_the_server_keeps_serving(base_url: str) -> None:
    status, body, _ = await post(f"{base_url}/run", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]
    status, body, _ = await post(
        f"{base_url}/run", {"responses_create_params": {"input": "x"}, "agent_ref": {"name": "nobody"}}
    )
    assert status == 404 and "unknown agent `nobody`" in body["error"]
    status, body, _ = await post(f"{base_url}/v1/rollouts", {"rows": [], "num_repeats": 1})
    assert status == 400 and "rows" in body["error"]
    # rows are checked where they enter: a row without `input` was a bare 500 before
    status, body, _ = await post(f"{base_url}/run", {"responses_create_params": {}})
    assert status == 422 and body["field"] == "responses_create_params.input" and "Field required" in body["error"]
    row = example_rows("example_single_tool_call")[0]
    bad_role = {**row, "responses_create_params": {"input": [{"role": "robot", "content": "hi"}]}}
    status, body, _ = await post(f"{base_url}/v1/rollouts", {"rows": [row, bad_role]})
    assert status == 422 and body["field"] == "rows.1.responses_create_params.input.0.role"
    status, body, _ = await post(f"{base_url}/v1/rollouts", {"rows": [row], "temperature": -1})
    assert status == 400 and body["field"] == "temperature"
    wrong_types = {
        "temperature": True,
        "max_output_tokens": "5",
        "num_repeats": True,
        "group_policy": {"finish_at": True},
    }
    for name, value in wrong_types.items():  # lax parsing would take each as 1 (or 5): the schema says no
        status, body, _ = await post(f"{base_url}/v1/rollouts", {"rows": [row], name: value})
        assert status == 400 and body["field"].startswith(name), (name, body)
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
    code = (
        "import sys; sys.modules['ray'] = None; import gym_serve.client; "
        "assert 'ray' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---- deadlines, cancellation, idempotency, metrics: a second ingress in front of an environment that can hang ----

DEADLINE_S = 4.0
SLOTS = 8


@pytest.fixture(scope="module")
def faulty(base_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """`/faulty`: an ingress with a short rollout deadline and 8 slots, over the counter env (rows may hang)."""
    markers = tmp_path_factory.mktemp("markers")
    serve.run(build_bump_model({"delay_s": 0.01}), name="bump_model", route_prefix=None)
    serve.run(
        build_app(
            AppArgs.model_validate(
                {
                    "environment": {
                        "name": "tests.fault_parts:SlowCounter",
                        "config": {"delay_s": 0.01, "marker_dir": str(markers)},
                    },
                    "agent": {"tier_call_timeout_s": 600},
                    "model": {"kind": "app", "app": "bump_model"},
                }
            )
        ),
        name="counter",
        route_prefix=None,
    )
    serve.run(
        build_ingress(
            {
                "agents": ["counter"],
                "default_agent": "counter",
                "max_in_flight": SLOTS,
                "rollout_deadline_s": DEADLINE_S,
            }
        ),
        name="faulty",
        route_prefix="/faulty",
    )
    return f"{base_url}/faulty", markers


def marker_counts(markers: Path) -> tuple[int, int]:
    return len(list(markers.glob("started-*"))), len(list(markers.glob("cancelled-*")))


async def wait_until_cancelled_downstream(markers: Path, timeout_s: float = 20.0) -> tuple[int, int]:
    """Wait until every hanging seed the environment started has been cancelled there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        started, cancelled = marker_counts(markers)
        if started and started == cancelled:
            return started, cancelled
        await asyncio.sleep(0.1)
    return marker_counts(markers)


async def scrape(url: str) -> dict[str, float]:
    """`GET /metrics` as {series with labels (replica label dropped): value}."""
    async with aiohttp.ClientSession(headers=AUTH) as session, session.get(f"{url}/metrics") as response:
        assert response.status == 200 and response.content_type == "text/plain"
        text = await response.text()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
            assert match, f"not a Prometheus sample line: {line!r}"
            labels = [label for label in match[2].split(",") if not label.startswith("replica=")]
            series[match[1] + (f"{{{','.join(labels)}}}" if labels else "")] = float(match[3])
    return series


async def test_a_hung_rollout_is_a_timeout_failure_on_run_and_rollouts(faulty: tuple[str, Path]) -> None:
    url, markers = faulty
    before = await scrape(url)
    started = time.monotonic()
    status, row, _ = await post(f"{url}/run", counting_rows(1, hang=True)[0])
    took = time.monotonic() - started
    assert status == 500 and row["_ng_failure_class"] == "agent_timeout" and "deadline" in row["error"]
    assert DEADLINE_S <= took < DEADLINE_S + 10, took
    async with aiohttp.ClientSession(headers=AUTH) as session:
        rows = [*counting_rows(2), *counting_rows(1, hang=True)]
        async with session.post(f"{url}/v1/rollouts", json={"rows": rows}) as response:
            lines = [json.loads(line) async for line in response.content if line.strip()]
    assert sorted(r.get("_ng_failure_class", "ok") for r in lines) == ["agent_timeout", "ok", "ok"]
    assert [r["reward"] for r in lines if "reward" in r] == [1.0, 1.0]
    started_seeds, cancelled_seeds = await wait_until_cancelled_downstream(markers)
    assert started_seeds == cancelled_seeds >= 2, "the timed-out seeds were cancelled in the environment replica"
    after = await scrape(url)
    assert (
        after['gym_serve_ingress_rollouts_total{outcome="agent_timeout"}']
        - before.get('gym_serve_ingress_rollouts_total{outcome="agent_timeout"}', 0)
        == 2
    )
    assert after["gym_serve_ingress_rollout_seconds_count"] - before["gym_serve_ingress_rollout_seconds_count"] == 4
    print(f"/run of a hung rollout: HTTP {status} after {took:.1f} s, class {row['_ng_failure_class']}")


async def in_flight(url: str) -> int:
    async with aiohttp.ClientSession(headers=AUTH) as session, session.get(f"{url}/v1/environments") as response:
        return (await response.json())["in_flight"]


async def test_a_client_that_goes_away_gives_its_slots_back_and_stops_the_work(faulty: tuple[str, Path]) -> None:
    url, markers = faulty
    before = await scrape(url)
    seeds_before = marker_counts(markers)[0]
    async with aiohttp.ClientSession(headers=AUTH) as session:
        response = await session.post(f"{url}/v1/rollouts", json={"rows": counting_rows(SLOTS, hang=True)})
        assert response.status == 200 and await in_flight(url) == SLOTS
        status, body, headers = await post(f"{url}/v1/rollouts", {"rows": counting_rows(1)})
        assert status == 429 and headers["Retry-After"] == "1", "all slots are taken by the hung batch"
        while marker_counts(markers)[0] < seeds_before + SLOTS:  # every rollout reached the environment
            await asyncio.sleep(0.05)
        dropped_at = time.monotonic()
        response.close()  # the trainer goes away mid-stream
    while await in_flight(url) and time.monotonic() - dropped_at < DEADLINE_S:
        await asyncio.sleep(0.05)
    freed_after = time.monotonic() - dropped_at
    assert await in_flight(url) == 0 and freed_after < DEADLINE_S, "freed by the disconnect, not by the deadline"
    after = await scrape(url)
    cancelled = 'gym_serve_ingress_rollouts_total{outcome="cancelled"}'
    assert after[cancelled] - before.get(cancelled, 0) == SLOTS
    started_seeds, cancelled_seeds = await wait_until_cancelled_downstream(markers)
    assert started_seeds == cancelled_seeds, "the environment replica stopped the hung seeds"
    status, lines, _ = await post(f"{url}/v1/rollouts", {"rows": counting_rows(SLOTS)})
    assert status == 200 and len(lines.splitlines()) == SLOTS, "the freed slots take new work (no 429)"
    print(
        f"disconnect: {SLOTS} slots back after {freed_after:.2f} s; environment cancelled "
        f"{cancelled_seeds}/{started_seeds} hung seeds"
    )


async def test_an_idempotent_resend_replays_what_finished_and_runs_only_the_rest(faulty: tuple[str, Path]) -> None:
    url, _ = faulty
    body = {"rows": [*counting_rows(3), *counting_rows(1, hang=True)], "idempotency_key": "batch-7"}
    async with aiohttp.ClientSession(headers=AUTH) as session:
        response = await session.post(f"{url}/v1/rollouts", json=body)
        assert response.status == 200 and response.headers["Idempotency-Replayed"] == "0"
        first = [json.loads(await response.content.readline()) for _ in range(3)]  # the hung one never comes
        status, conflict, headers = await post(f"{url}/v1/rollouts", body)
        assert status == 409 and headers["Retry-After"] == "1" and "still running" in conflict["error"]
        response.close()  # the connection drops
        for _ in range(50):  # the ingress notices the drop a moment later; until then the key is busy (409)
            again = await session.post(f"{url}/v1/rollouts", json=body)
            if again.status != 409:
                break
            again.close()
            await asyncio.sleep(0.1)
        assert again.status == 200 and again.headers["Idempotency-Replayed"] == "3"
        lines = [json.loads(line) async for line in again.content if line.strip()]
    assert lines[:3] == first, "replayed rows are the very rows of the first run (timings included): not re-run"
    assert len(lines) == 4 and lines[3]["_ng_failure_class"] == "agent_timeout", (
        "only the unfinished rollout ran again"
    )
    status, mismatch, _ = await post(f"{url}/v1/rollouts", {**body, "num_repeats": 2})
    assert status == 422 and "different request body" in mismatch["error"]
    assert (await scrape(url))["gym_serve_ingress_replayed_total"] >= 3


async def cutting_proxy(upstream_port: int) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """A TCP proxy that cuts its first connection as soon as a rollout line has gone through it."""
    connections: list[int] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: bool) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if cut and b"_ng_rollout_index" in data:
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        cut = len(connections) == 1
        await asyncio.gather(pipe(client_reader, up_writer, False), pipe(up_reader, client_writer, cut))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


async def test_the_client_resends_after_a_dropped_connection_and_yields_each_rollout_once(
    faulty: tuple[str, Path],
) -> None:
    url, _ = faulty
    replayed_before = (await scrape(url))["gym_serve_ingress_replayed_total"]
    port = int(url.split(":")[2].split("/")[0])
    server, proxy_port, connections = await cutting_proxy(port)
    async with server, GymClient(f"http://127.0.0.1:{proxy_port}/faulty", token=TOKEN) as client:
        results = [r async for r in client.rollouts(counting_rows(3), num_repeats=2)]
    assert len(connections) >= 2, "the first connection was cut and the client sent the batch again"
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in results) == [
        (t, k) for t in range(3) for k in range(2)
    ]
    assert all(r["reward"] == 1.0 for r in results)
    assert (await scrape(url))["gym_serve_ingress_replayed_total"] > replayed_before


async def test_metrics_need_the_token_and_count_rejections(faulty: tuple[str, Path]) -> None:
    url, _ = faulty
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        assert response.status == 401
    status, _, _ = await post(f"{url}/run", counting_rows(1)[0])
    assert status == 200
    status, _, _ = await post(f"{url}/v1/rollouts", {"rows": counting_rows(SLOTS + 1)})
    assert status == 429
    series = await scrape(url)
    assert series['gym_serve_ingress_rejected_total{reason="saturated"}'] >= 1
    assert series["gym_serve_ingress_in_flight"] == 0
    total = series["gym_serve_ingress_rollout_seconds_count"]
    assert total > 0 and series['gym_serve_ingress_rollout_seconds_bucket{le="+Inf"}'] == total


# ---- streaming, groups ----


def test_streaming_through_the_openai_client_is_a_clear_400(base_url: str) -> None:
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key=TOKEN, max_retries=0)
    prompt = example_rows("example_single_tool_call")[0]["responses_create_params"]
    with pytest.raises(BadRequestError, match="`stream: true` is not supported"):
        client.chat.completions.create(model="replay", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(BadRequestError, match="`stream: true` is not supported"):
        client.responses.create(model="replay", input=prompt["input"], tools=prompt["tools"], stream=True)


async def test_a_model_call_the_model_cannot_answer_is_an_openai_shaped_error_naming_its_kind(base_url: str) -> None:
    """A replay miss (no recording of this prompt) through the model endpoints: 502 with the kind, no traceback."""
    for path, body in (
        ("/v1/responses", {"input": "no recording holds this prompt"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "nor this one"}]}),
    ):
        status, answer, _ = await post(f"{base_url}{path}", body)
        assert status == 502, answer
        assert answer["error"]["message"].startswith("the model tier failed (replay_miss): ")
        assert "Traceback" not in json.dumps(answer)


async def test_identical_rows_are_one_task_and_its_rollouts_one_group(base_url: str) -> None:
    """NeMo Gym's numbering, as a collection numbers: a row sent twice is one task with twice the rollouts."""
    same, other = example_rows("example_single_tool_call")[:2]
    async with aiohttp.ClientSession(headers=AUTH) as session:
        body = {"rows": [same, same, other], "num_repeats": 2, "group_size": 4}
        async with session.post(f"{base_url}/v1/rollouts", json=body) as response:
            assert response.status == 200
            lines = [json.loads(line) async for line in response.content if line.strip()]
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in lines]
    assert sorted(keys[:4]) == [(0, 0), (0, 1), (0, 2), (0, 3)], "the repeated row's 4 rollouts, one group"
    assert sorted(keys[4:]) == [(1, 0), (1, 1)], "the other row's 2: the last, smaller group"


async def test_groups_arrive_whole_through_the_client(base_url: str) -> None:
    a, b, c = example_rows("example_single_tool_call")[:3]
    async with GymClient(base_url, token=TOKEN, max_in_flight=4) as client:
        lines = [r async for r in client.rollouts([a, b, a, c, a, b], num_repeats=2, group_size=6, batch_size=1)]
    tasks = [r["_ng_task_index"] for r in lines]
    assert len(lines) == 12 and len(set(zip(tasks, (r["_ng_rollout_index"] for r in lines), strict=True))) == 12
    runs = [tasks[0]] + [t for previous, t in zip(tasks, tasks[1:], strict=False) if t != previous]
    assert sorted(runs) == [0, 1, 2], f"each task's rollouts in one run of lines: {tasks}"
    assert tasks.count(0) == 6 and tasks.count(1) == 4 and tasks.count(2) == 2


async def test_groups_are_split_by_agent_as_well_as_task(base_url: str) -> None:
    """Rows of two agents with the same task index (from two datasets) are two tasks, not one group."""
    weather = {**example_rows("example_single_tool_call")[0], "_ng_task_index": 0}
    counter = {**example_rows("example_session_state")[0], "_ng_task_index": 0}
    counter["agent_ref"] = {"name": "example_session_state"}
    async with aiohttp.ClientSession(headers=AUTH) as session:
        body = {"rows": [weather, counter], "num_repeats": 2, "group_size": 2}
        async with session.post(f"{base_url}/v1/rollouts", json=body) as response:
            assert response.status == 200
            lines = [json.loads(line) async for line in response.content if line.strip()]
    groups = [lines[0:2], lines[2:4]]
    assert sorted({r["agent_ref"]["name"] for r in group}.pop() for group in groups) == sorted(
        ["example_single_tool_call", "example_session_state"]
    )
    assert all(len({r["agent_ref"]["name"] for r in group}) == 1 for group in groups)


def test_an_ingress_asked_for_auth_without_a_token_refuses_to_start(base_url: str) -> None:
    args = {"agents": ["example_single_tool_call"], "token_env": "GYM_SERVE_TEST_NO_SUCH_TOKEN", "require_token": True}
    with pytest.raises(RuntimeError, match="Deploying application"):
        serve.run(build_ingress(args), name="guarded", route_prefix="/guarded")
    message = serve.status().applications["guarded"].deployments["Ingress"].message
    assert "requires a bearer token" in message and "GYM_SERVE_TEST_NO_SUCH_TOKEN" in message
    serve.delete("guarded")


async def test_the_openapi_schema_describes_every_routes_body_and_answers(base_url: str) -> None:
    """`GET /openapi.json` (no token needed): every route with its request body and its answers, each with a
    schema, and every schema reference resolves inside the document."""
    from fastapi.routing import APIRoute

    from gym_serve.deployments.ingress.api import app

    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/openapi.json") as response:
        assert response.status == 200
        schema = await response.json()
    routes = [
        (route.path, method.lower(), route.body_field is not None)
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    ]
    assert len(routes) == 10 and {path for path, _, _ in routes} == set(schema["paths"])
    for path, method, takes_a_body in routes:
        operation = schema["paths"][path][method]
        assert ("requestBody" in operation) == takes_a_body, f"{method} {path}"
        if takes_a_body:
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert body.get("$ref") or body.get("properties"), f"{method} {path}: its body has no schema"
        assert operation["responses"]["200"]["content"], f"{method} {path}: no 200 answer described"
        for status, answer in operation["responses"].items():
            assert all(media.get("schema") for media in answer.get("content", {}).values()), f"{path} {status}"
        if path != "/healthz":
            assert "401" in operation["responses"], f"{method} {path}: the token's refusal is not described"
    text = json.dumps(schema)
    for ref in set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', text)):
        assert ref in schema["components"]["schemas"], f"a reference to a schema not in the document: {ref}"
    assert schema["paths"]["/v1/rollouts"]["post"]["responses"]["200"]["content"]["application/x-ndjson"]
    assert schema["paths"]["/v1/responses"]["post"]["responses"]["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/OpenAIErrorBody"
    }


async def test_an_overload_is_refused_with_429s_while_taken_requests_keep_their_latency(base_url: str) -> None:
    """Requests at 10× an ingress's capacity for a few seconds (`gym_serve.testing.overload`; the minute-long
    version is benchmarks/overload.py): no 5xx, every refusal a 429 with `Retry-After`, the taken requests' p99
    within 2× the one at capacity, the replica's memory flat after the burst's first seconds, every slot taken
    again (the full rate) within 5 s."""
    model = {"kind": "synthetic", "latency": {"mean_s": 0.5}}
    app = AppArgs.model_validate({"environment": {"name": "example_single_tool_call"}, "model": model})
    serve.run(build_app(app), name="slow_weather", route_prefix=None)
    ingress = {"agents": ["slow_weather"], "default_agent": "slow_weather", "max_in_flight": 4}
    ingress["token_env"] = "GYM_SERVE_TEST_NO_SUCH_TOKEN"  # no auth: the load generator sends no token
    serve.run(build_ingress(ingress), name="overloaded", route_prefix="/overloaded")
    try:
        report = await overload(
            f"{base_url}/overloaded",
            example_rows("example_single_tool_call")[0],
            slots=4,
            seconds=6,
            capacity_s=4,
            recovery_s=6,
            app="overloaded",
        )
    finally:
        serve.delete("overloaded")
        serve.delete("slow_weather")
    assert report.problems == [], report.model_dump_json(indent=1)
    assert report.overload.taken > 0 and report.refused_with_retry_after > report.overload.taken
    assert report.rss_mb and report.cpu_s["ray::ServeReplica:overloaded:Ingress"] > 0
