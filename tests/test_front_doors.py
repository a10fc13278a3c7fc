"""The three front doors start rollouts one way (`gym_serve.collect.dispatch`): a file collection (the driver
actor), the in-cluster stream (`ServeRollouts`) and the HTTP ingress (`POST /v1/rollouts`), given the same rows,
number the same tasks and rollouts and leave the same failure rows, on real deployments.

The rows hold what each door used to treat its own way: a row sent twice (one task, its rollouts numbered on),
per-agent repeats, a row with its own task index, a row the protocol models refuse, a row naming an agent
that is not deployed, and a row whose rollout fails when it runs (the replay model has no recording of it).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
from ray import serve

from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob, failures_path
from gym_serve.collect.stream import ServeRollouts
from gym_serve.deployments.app import build_app
from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows

pytestmark = pytest.mark.serve

WEATHER, COUNTER = "example_single_tool_call", "example_session_state"
AGENTS = [WEATHER, COUNTER]
REPEATS = {WEATHER: 2, COUNTER: 3}
TEMPERATURE = 0.5


def rows() -> list[dict[str, Any]]:
    weather, counter = example_rows(WEATHER), example_rows(COUNTER)
    return [
        weather[0],  # line 1: task 0
        weather[1],  # line 2: task 1
        weather[0],  # line 3: line 1 again: task 0, rollouts 2 and 3
        {**counter[0], "agent_ref": {"name": COUNTER}},  # line 4: task 2, three repeats (its agent's)
        {"responses_create_params": {"input": [{"role": "robot", "content": "hi"}]}},  # line 5: refused
        {**weather[2], "agent_ref": {"name": "nobody"}},  # line 6: no such agent
        {"responses_create_params": {"input": "a prompt no recording holds"}},  # line 7: task 3, fails as it runs
        {**weather[3], "_ng_task_index": 40},  # line 8: its own task index
    ]


ROLLOUTS = sorted(
    [(WEATHER, 0, k) for k in range(4)] + [(WEATHER, 1, 0), (WEATHER, 1, 1)] + [(COUNTER, 2, k) for k in range(3)]
    + [(WEATHER, 40, 0), (WEATHER, 40, 1)]
)  # fmt: skip
FAILURES = sorted(
    [
        ("line 5", "bad_input", 0, "line 5, field `responses_create_params.input.0.role`: Input should be 'user'"),
        ("line 6", "bad_input", 0, "line 6, field `agent_ref.name`: unknown agent `nobody`; deployed: "),
        ((WEATHER, 3, 0), "replay_miss", 1, "No recording matches this conversation"),
        ((WEATHER, 3, 1), "replay_miss", 1, "No recording matches this conversation"),
    ],
    key=str,
)


@pytest.fixture(scope="module")
def ingress_url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.pop("GYM_SERVE_TOKEN", None)
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for env in AGENTS:
        serve.run(build_app(AppArgs.model_validate({"environment": {"name": env}})), name=env, route_prefix=None)
    serve.run(build_ingress({"agents": AGENTS, "default_agent": WEATHER}), name="ingress", route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


async def through_a_file(tmp_path: Path, url: str) -> list[dict[str, Any]]:
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    job = CollectJob(
        input_path=str(source),
        output_path=str(out),
        agents=AGENTS,
        default_agent=WEATHER,
        num_repeats=REPEATS,
        params_overrides={"temperature": TEMPERATURE},
    )
    driver: Any = RolloutDriver
    await driver.remote().collect.remote(job)
    return [json.loads(line) for path in (out, failures_path(out)) for line in path.read_text().splitlines()]


async def through_the_stream(tmp_path: Path, url: str) -> list[dict[str, Any]]:
    source = ServeRollouts(agents=AGENTS, default_agent=WEATHER)
    stream = source.rollouts(rows(), num_repeats=REPEATS, temperature=TEMPERATURE, on_bad_row="fail")
    return [row async for row in stream]


async def through_http(tmp_path: Path, url: str) -> list[dict[str, Any]]:
    body = {"rows": rows(), "num_repeats": REPEATS, "temperature": TEMPERATURE, "on_bad_row": "fail"}
    async with aiohttp.ClientSession() as session, session.post(f"{url}/v1/rollouts", json=body) as response:
        assert response.status == 200, await response.text()
        return [json.loads(line) async for line in response.content if line.strip()]


@pytest.mark.parametrize("door", [through_a_file, through_the_stream, through_http], ids=["file", "stream", "http"])
async def test_every_front_door_numbers_and_fails_the_same_rows_the_same_way(
    door: Any, tmp_path: Path, ingress_url: str
) -> None:
    results = await door(tmp_path, ingress_url)
    rollouts = [r for r in results if "_ng_failure_class" not in r]
    failures = [r for r in results if "_ng_failure_class" in r]
    assert sorted((r["agent_ref"]["name"], r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts) == ROLLOUTS
    assert all(r["reward"] == 1.0 and r["responses_create_params"]["temperature"] == TEMPERATURE for r in rollouts)
    seen = sorted(((_where(f), f["_ng_failure_class"], f["attempts"], _error(f)) for f in failures), key=str)
    assert [entry[:3] for entry in seen] == [entry[:3] for entry in FAILURES], seen
    for (_, _, _, error), (_, _, _, expected) in zip(seen, FAILURES, strict=True):
        assert expected in error, (error, expected)
    assert all(f["mask_sample"] is True for f in failures)


def _where(failure: dict[str, Any]) -> Any:
    """A bad row's line, or a rollout's key."""
    if "line" in failure:
        return f"line {failure['line']}"
    return failure["agent_ref"]["name"], failure["_ng_task_index"], failure["_ng_rollout_index"]


def _error(failure: dict[str, Any]) -> str:
    """The error without the name of the door's input (the file's path, or `rows`)."""
    return str(failure["error"]).removeprefix(f"{failure.get('source')}, ")
