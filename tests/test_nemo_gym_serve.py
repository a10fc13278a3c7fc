"""NeMo Gym servers hosted by real Environment deployments: sessions stay on their replica, survive nothing
they cannot, autoscale, and NeMo Gym's own rows run through a collection as they are.

`example_session_state_mgmt` is the witness throughout: it keeps each rollout's
counter in its process memory, keyed by the session cookie, so a call that
reached the wrong replica would count from zero and score 0 (here it fails as
`session_lost` instead).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve

from gym_serve.calls.handles import EnvironmentHandle
from gym_serve.calls.routing import REPLICA_KEY
from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob, failures_path
from gym_serve.deployments.app import build_app
from gym_serve.environment import nemo_gym
from gym_serve.errors import FailureKind, failure_kind
from gym_serve.serving.config import AppArgs, load_serve_config
from gym_serve.testing.fixtures import unique
from tests.conftest import REPO, killed, written_lines

pytestmark = pytest.mark.serve

SERVER = "example_session_state_mgmt"
ZERO = {"ray_actor_options": {"num_cpus": 0}}


def deploy(name: str, environment: dict[str, Any], model: dict[str, Any] | None = None) -> Any:
    args = {
        "environment": {"kind": "nemo_gym", "server": SERVER, **environment},
        "model": {"kind": "replay", **(model or {}), "deployment": ZERO},
        "agent": {"max_steps": 20, "deployment": ZERO},
    }
    return serve.run(build_app(AppArgs.model_validate(args)), name=name, route_prefix=None)


def rows() -> list[dict[str, Any]]:
    path = nemo_gym.data_dir(SERVER) / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def replica_actors(app: str, deployment: str) -> list[str]:
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    return [n for n in names if n.startswith(f"SERVE_REPLICA::{app}#{deployment}#")]


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def count_to(env: EnvironmentHandle, row: dict[str, Any], state: Any) -> dict[str, Any]:
    """The rollout a model would make: add the row's steps to the counter, then verify the expected count."""
    increments = row["expected_count"] - row["initial_count"]
    calls = [{"call_id": "c", "name": "increment_counter", "arguments": json.dumps({"count": increments})}]
    _, state = await env.call_tools(calls, state)
    return await env.verify(row, {"output": []}, state)


@pytest.mark.timeout(300)
async def test_a_rollouts_calls_reach_the_replica_that_seeded_it(serve_instance: None) -> None:
    name = unique("ng-sticky")
    deploy(name, {"deployment": {"num_replicas": 2, **ZERO}})
    env = EnvironmentHandle(serve.get_deployment_handle("Environment", app_name=name))
    tasks = [{**row, "initial_count": i} for i in range(10) for row in rows()]
    states = []
    for start in range(0, len(tasks), 5):  # first calls go to the less loaded of two random replicas
        states += await asyncio.gather(*(env.seed(row) for row in tasks[start : start + 5]))
    replicas = {state[REPLICA_KEY] for state in states}
    assert len(replicas) == 2, "new rollouts go to both replicas"
    verdicts = await asyncio.gather(*(count_to(env, row, state) for row, state in zip(tasks, states, strict=True)))
    assert [v["reward"] for v in verdicts] == [1.0] * len(tasks), "every call found its rollout's counter"

    # a state naming the other replica goes there, as asked, and finds no session: `session_lost`, not a 0
    (row, state), other = (tasks[0], states[0]), next(r for r in replicas if r != states[0][REPLICA_KEY])
    with pytest.raises(Exception) as misrouted:
        await count_to(env, row, {**state, REPLICA_KEY: other})
    assert failure_kind(misrouted.value) is FailureKind.SESSION_LOST

    # a server that answers 422 fails that rollout as `env_error`, and the replica goes on serving
    with pytest.raises(Exception) as bad_seed:
        await env.seed({"responses_create_params": {"input": "no initial_count"}})
    assert failure_kind(bad_seed.value) is FailureKind.ENV_ERROR
    again = [await env.seed(row) for row in tasks[:6]]
    assert {s[REPLICA_KEY] for s in again} <= replicas, "the same replicas, none restarted"

    # the replica holding a session dies: that rollout's next call is a lost session (retryable)
    victim = states[1][REPLICA_KEY]
    actor = next(a for a in replica_actors(name, "Environment") if a.endswith(victim))
    await killed(actor)
    with pytest.raises(Exception) as died:
        await count_to(env, tasks[1], states[1])
    assert failure_kind(died.value) is FailureKind.SESSION_LOST
    serve.delete(name)


@pytest.mark.timeout(400)
async def test_killing_each_environment_replica_mid_collection_loses_no_rollout(
    serve_instance: None, tmp_path: Path
) -> None:
    name = unique("ng-kill")
    model = {"kind": "synthetic", "latency": {"mean_s": 0.05}}
    deploy(name, {"deployment": {"num_replicas": 2, **ZERO}}, model)
    out = tmp_path / "out.jsonl"
    job = CollectJob(
        input_path=str(nemo_gym.data_dir(SERVER) / "example.jsonl"),
        output_path=str(out),
        agents=[name],
        default_agent=name,
        num_repeats=40,
        concurrency=32,
        max_attempts=8,
    )
    driver = RolloutDriver.remote()
    collection = asyncio.ensure_future(driver.collect.remote(job))
    # each replica in turn: on a loaded machine an Agent's router may learn of the second replica late and
    # start every session on the first, so only killing both is sure to kill sessions in flight
    victims = replica_actors(name, "Environment")
    deadline = time.monotonic() + 240
    for written, victim in zip((50, 100), victims, strict=True):
        while written_lines(out) < written and not collection.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not collection.done(), "each kill must land while rollouts are in flight"
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=False)
    summary = (await collection).model_dump()
    ray.kill(driver)

    rollouts = read(out)
    keys = sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts)
    assert keys == [(t, k) for t in range(5) for k in range(40)], "every rollout exactly once"
    assert summary["failures"] == 0 and read(failures_path(out)) == []
    assert summary["retries"] > 0, "the rollouts whose sessions died were tried again"
    assert all(r["reward"] == 1.0 for r in rollouts), "every retried rollout counted on one replica"
    print(f"nemo kill test: killed {victims}; 200 expected, {len(rollouts)} written, retries {summary['retries']}")
    serve.delete(name)


@pytest.mark.timeout(400)
@pytest.mark.filterwarnings("ignore:The `metrics_interval_s` field in AutoscalingConfig:DeprecationWarning")
async def test_the_environment_tier_autoscales_and_sessions_keep_their_replica(serve_instance: None) -> None:
    name = unique("ng-scale")
    autoscaling = {
        "min_replicas": 1,
        "max_replicas": 2,
        "target_ongoing_requests": 0.1,  # calls in flight per replica: any steady load asks for the second one
        "upscale_delay_s": 0,
        "downscale_delay_s": 600,
        "look_back_period_s": 1,
        "metrics_interval_s": 0.5,
    }
    handle = deploy(name, {"deployment": {"autoscaling_config": autoscaling, **ZERO}})
    env = EnvironmentHandle(serve.get_deployment_handle("Environment", app_name=name))
    tasks = rows()
    seen_replicas: set[str] = set()
    rewards: list[float] = []
    loaded = True

    async def client(i: int) -> None:
        while loaded:
            row = tasks[i % len(tasks)]
            state = await env.seed(row)
            seen_replicas.add(state[REPLICA_KEY])
            await asyncio.sleep(0.3)  # a model turn: sessions stay open while the replica set changes
            rewards.append((await count_to(env, row, state))["reward"])

    clients = [asyncio.ensure_future(client(i)) for i in range(40)]
    most, deadline = 1, time.monotonic() + 150
    while time.monotonic() < deadline and (most < 2 or len(seen_replicas) < 2) and not any(c.done() for c in clients):
        await asyncio.sleep(0.5)
        status = serve.status().applications[name].deployments["Environment"]
        most = max(most, status.replica_states.get("RUNNING", 0))
    await asyncio.sleep(2)  # rollouts that started before the new replica finish after it joined
    loaded = False
    await asyncio.gather(*clients)  # a lost session would raise here
    assert most == 2 and len(seen_replicas) == 2, "the tier scaled up and new sessions went to the new replica"
    assert len(rewards) > 40 and all(r == 1.0 for r in rewards), "no session moved when the replica set changed"
    assert (await handle.run.remote({**tasks[0], "_ng_task_index": 0}))["reward"] == 1.0
    serve.delete(name)


def readme_command(starts: str) -> str:
    """The README's command that starts with `starts` (continuation lines joined)."""
    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith(starts)]
    return line


def run_readme_command(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run it as a user would, with this virtual environment's `gym-serve` and `python` first on PATH."""
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PATH"] = f"{venv_bin}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.timeout(700)
def test_nemo_gyms_example_rows_run_as_they_are_with_the_readmes_collect(tmp_path: Path) -> None:
    """NeMo Gym's own example.jsonl, the server's Serve config from deployments/nemo_gym/, as the README says."""
    command = readme_command("gym-serve collect --config deployments/nemo_gym/")
    for config in ("deployments/nemo_gym/example_single_tool_call.yaml",):
        command = command.replace(config, str(REPO / config))
    result = run_readme_command(command + " --num-repeats 2", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rollouts = read(tmp_path / "rollouts.jsonl")
    (spec,) = load_serve_config(REPO / "deployments" / "nemo_gym" / "example_single_tool_call.yaml")
    assert len(rollouts) == 10 and {r["agent_ref"]["name"] for r in rollouts} == {spec.name}
    recorded = [r["reward"] for r in read(nemo_gym.data_dir("example_single_tool_call") / "example_rollouts.jsonl")]
    assert sorted(r["reward"] for r in rollouts) == sorted(recorded * 2), "NeMo Gym's recorded rewards"
    assert all({"failure_kind", "failure_reason", "mask_sample"} <= r.keys() for r in rollouts)


@pytest.mark.timeout(700)
def test_the_readmes_env_test_checks_a_hosted_server(tmp_path: Path) -> None:
    result = run_readme_command(readme_command("gym-serve env test nemo_gym:"), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "nemo_gym:xlam_fc: 5/5 rows pass (reward got (recorded)) OK" in result.stdout
