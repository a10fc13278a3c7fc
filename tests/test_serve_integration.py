"""Real Ray + Serve: applications built by `build_app`, rollouts through deployment handles, the driver actor."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic import BaseModel
from ray import serve

from gym_serve import Environment, Verdict, tool
from gym_serve.calls.batching import BatchedResponses
from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob, failures_path
from gym_serve.deployments.app import build_app
from gym_serve.serving.config import AppArgs
from gym_serve.testing.fixtures import example_rows, unique

pytestmark = pytest.mark.serve


class Visits(BaseModel):
    count: int = 0
    replicas: list[str] = []


class TrackingCounter(Environment):
    """A counter whose state also records which replica served each call."""

    State = Visits

    @tool
    async def bump(self, state: Visits) -> int:
        """Add one."""
        await asyncio.sleep(0.005)
        state.count += 1
        state.replicas.append(serve.get_replica_context().replica_id.unique_id)
        return state.count

    async def verify(self, task, response, state: Visits) -> Verdict:
        return Verdict(
            reward=1.0 if state.count == task.bumps else 0.0, fields={"replicas_seen": len(set(state.replicas))}
        )


@serve.deployment(name="Model", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
class BumpModel(BatchedResponses):
    """A scripted model deployment (so calls cross processes as real ones do).

    Calls `bump` `row.bumps` times, one call per turn, then answers. A model of the agent's rhythm: each call
    takes a random few milliseconds, so episodes drift out of step and their calls mix in new batches."""

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        await asyncio.sleep(random.uniform(0.0, 0.02))
        items = request["input"]
        done = sum(1 for item in items if item.get("type") == "function_call_output")
        wanted = int(items[0]["content"])
        if done < wanted:
            output = [{"type": "function_call", "name": "bump", "arguments": "{}", "call_id": f"c{done}", "id": "f"}]
        else:
            output = [
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "m",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}],
                }
            ]
        return {"id": "r", "object": "response", "status": "completed", "output": output}


def app_args(env: str, **tiers: Any) -> AppArgs:
    return AppArgs.model_validate({"environment": {"name": env, **tiers.pop("environment", {})}, **tiers})


async def test_example_apps_roll_out_through_handles(serve_instance: None) -> None:
    for env in ("example_single_tool_call", "example_multi_step", "example_session_state"):
        name = unique(env)
        handle = serve.run(build_app(app_args(env)), name=name, route_prefix=None)
        rows = [{**row, "_ng_task_index": i, "_ng_rollout_index": 0} for i, row in enumerate(example_rows(env))]
        rollouts = await asyncio.gather(*(handle.run.remote(row) for row in rows))
        assert [r["reward"] for r in rollouts] == [1.0] * len(rows), env
        assert all(r["response"]["output"] for r in rollouts)
        assert [r["_ng_task_index"] for r in rollouts] == list(range(len(rows)))
        serve.delete(name)


async def test_state_survives_two_environment_replicas_under_concurrency(serve_instance: None) -> None:
    name = unique("tracking")
    env = build_app(
        app_args(
            "tests.test_serve_integration:TrackingCounter",
            environment={"deployment": {"num_replicas": 2}},
            model={"kind": "app", "app": name + "-model"},
        )
    )
    serve.run(BumpModel.bind(), name=name + "-model", route_prefix=None)
    handle = serve.run(env, name=name, route_prefix=None)
    rows = [
        {
            "responses_create_params": {"input": [{"role": "user", "content": str(3 + i % 5)}]},
            "bumps": 3 + i % 5,
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
        }
        for i in range(200)
    ]
    rollouts = await asyncio.gather(*(handle.run.remote(row) for row in rows))
    assert all(r["reward"] == 1.0 for r in rollouts), [r["reward"] for r in rollouts if r["reward"] != 1.0]
    # one rollout's calls really did land on different replicas, and its state followed them
    assert sum(r["replicas_seen"] == 2 for r in rollouts) > 50
    tool_outputs = [
        [i["output"] for i in r["response"]["output"] if i["type"] == "function_call_output"] for r in rollouts
    ]
    assert all(out == [str(n) for n in range(1, len(out) + 1)] for out in tool_outputs)
    status = serve.status().applications[name].deployments["Environment"]
    assert status.replica_states.get("RUNNING") == 2
    serve.delete(name)
    serve.delete(name + "-model")


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


async def test_driver_collects_skips_bad_rows_and_records_failures(serve_instance: None, tmp_path: Path) -> None:
    name = unique("counter")
    serve.run(build_app(app_args("example_session_state")), name=name, route_prefix=None)
    good = example_rows("example_session_state")
    no_task_fields = {"responses_create_params": good[0]["responses_create_params"]}  # seed cannot run
    lines = [good[0], "{broken", good[1], no_task_fields, {"prompt": "no params"}, *good[2:]]
    source = write_rows(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    driver = RolloutDriver.remote()
    job = CollectJob(
        input_path=str(source), output_path=str(out), agents=[name], default_agent=name, num_repeats=3, concurrency=8
    )
    summary = (await driver.collect.remote(job)).model_dump()

    rollouts = [json.loads(line) for line in out.read_text().splitlines()]
    failures = [json.loads(line) for line in failures_path(out).read_text().splitlines()]
    assert summary["rows_read"] == len(lines) and summary["rows_skipped"] == 2
    assert summary["rollouts"] == len(rollouts) == 3 * len(good)
    # two lines cannot be read; one row reads but does not fit the environment's task: bad input too, found at seed
    assert summary["failures"] == 3 and summary["failures_by_class"] == {"bad_input": 5}
    keys = sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts)
    assert len(set(keys)) == len(keys), "every rollout written once"
    assert all(r["reward"] == 1.0 for r in rollouts)
    assert all(f["_ng_failure_class"] == "bad_input" and f["mask_sample"] is True for f in failures)
    unreadable = sorted(f["line"] for f in failures if f["attempts"] == 0)
    assert unreadable == [2, 5]
    unfit = [f for f in failures if f["attempts"] > 0]
    assert all("initial_count" in f["error"] and f["attempts"] == 1 for f in unfit), "bad input is not retried"
    assert sorted(f["_ng_rollout_index"] for f in unfit) == [0, 1, 2]
    ray.kill(driver)
    serve.delete(name)
