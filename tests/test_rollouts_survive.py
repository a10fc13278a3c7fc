"""Rollouts that survive, on real Serve deployments: a replica killed mid-rollout, a batch paused by its trainer
and continued (in the cluster and over HTTP), and what is refused: an unknown batch, an altered partial, a
partial sent to another application or policy.

One Ray instance for the module. `counter` is a multi-turn environment (one `bump` per turn, its state in the
rollout) with two replicas; its `park_at`-th bump waits at a gate the test opens (`tests.parked_env`), so a
rollout is held in the middle of a turn. Its model is a scripted policy whose calls carry contiguous token
bundles (`tests.fault_parts.BumpModel`). `other` is the same environment on a policy of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import ray
from ray import serve

from gym_serve.client import GymClient
from gym_serve.collect.stream import ServeRollouts
from gym_serve.deployments.app import build_app
from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.wire.tokens import check_contiguity
from tests.conftest import killed
from tests.fault_parts import BumpModel, counting_rows
from tests.parked_env import gate

pytestmark = [pytest.mark.serve, pytest.mark.timeout(300)]

COUNTER, OTHER = "counter", "other"


def counter_app(model_app: str, replicas: int) -> Any:
    args = {
        "environment": {
            "name": "tests.fault_parts:GatedCounter",
            "config": {"delay_s": 0.0, "park_at": 2},
            "deployment": {"num_replicas": replicas},
        },
        "agent": {"tier_call_timeout_s": 60.0},
        "model": {"kind": "app", "app": model_app},
    }
    return build_app(AppArgs.model_validate(args))


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.pop("GYM_SERVE_TOKEN", None)
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for name, replicas in ((COUNTER, 2), (OTHER, 1)):
        serve.run(BumpModel.bind(delay_s=0.01, tokens=True), name=f"{name}-model", route_prefix=None)
        serve.run(counter_app(f"{name}-model", replicas), name=name, route_prefix=None)
    serve.run(build_ingress({"agents": [COUNTER, OTHER], "default_agent": COUNTER}), name="ingress", route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


def row(bumps: int, task: int) -> dict[str, Any]:
    return {**counting_rows(1)[0], "responses_create_params": {"input": [{"role": "user", "content": str(bumps)}]},
            "bumps": bumps, "_ng_task_index": task}  # fmt: skip


async def parked(held: Any, arrivals: int, work: asyncio.Future[Any]) -> None:
    """Wait until `arrivals` rollouts wait at the gate (each in the middle of its second turn)."""
    for _ in range(1200):
        if await held.count.remote() >= arrivals:
            return
        assert not work.done(), work.result()
        await asyncio.sleep(0.05)
    raise AssertionError("no rollout reached the gate")


async def model_calls(session: str) -> int:
    model = serve.get_deployment_handle("Model", app_name=f"{COUNTER}-model")
    return sum(await model.broadcast("calls_of", session).results_async(timeout_s=30))


def without_ids(rollout: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in rollout["response"]["output"]]


async def test_a_rollout_whose_environment_replica_dies_resumes_at_its_last_turn_on_the_other(url: str) -> None:
    held = gate()
    await held.open.remote()
    source = ServeRollouts(agents=[COUNTER], default_agent=COUNTER)
    (undisturbed,) = [r async for r in source.rollouts([row(3, task=0)])]
    await held.close.remote()
    arrivals = await held.count.remote()
    rollout = asyncio.ensure_future(_first(source.rollouts([row(3, task=1)])))
    await parked(held, arrivals + 1, rollout)
    victim = (await held.who.remote())[-1]
    (actor,) = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].endswith(victim)]
    await killed(actor["name"], actor["namespace"])
    await held.open.remote()
    resumed = await asyncio.wait_for(rollout, timeout=120)

    assert "_ng_failure_class" not in resumed, resumed.get("error")
    assert resumed["resumed_at_turn"] == 1 and resumed["attempts"] == 2, "the second turn, cut by the kill, ran again"
    assert resumed["_gs_timings"]["turns"] == undisturbed["_gs_timings"]["turns"] == 4
    assert resumed["reward"] == undisturbed["reward"] == 1.0
    assert check_contiguity(resumed).ok and len(check_contiguity(resumed).problems) == 0
    assert without_ids(resumed) == without_ids(undisturbed), "the same items, token ids and log-probs"
    assert await model_calls("1:0") == 5 and await model_calls("0:0") == 4, (
        "4 turns, and the one the kill cut, once more"
    )
    print(f"killed Environment replica {victim}; resumed at turn 1, 5 model calls for 4 turns (from scratch: 6)")


async def _first(batch: Any) -> dict[str, Any]:
    return [r async for r in batch][0]


async def test_a_paused_batch_comes_back_as_partials_that_continue_to_the_end(url: str) -> None:
    held = gate()
    await held.close.remote()
    arrivals = await held.count.remote()
    source = ServeRollouts(agents=[COUNTER, OTHER], default_agent=COUNTER)
    batch = source.rollouts([row(3, task=10), row(1, task=11)])
    rows = aiter(batch)
    finished = await anext(rows)  # task 11 (one bump) finishes; task 10 waits in its second turn
    await parked(held, arrivals + 1, asyncio.ensure_future(asyncio.sleep(3600)))
    assert await batch.pause() == 1
    await held.open.remote()
    (partial,) = [r async for r in rows]
    assert finished["_ng_task_index"] == 11 and finished["reward"] == 1.0
    assert partial["_ng_task_index"] == 10 and partial["turns"] == 2 and partial["mask_sample"] is True
    assert check_contiguity(partial).ok and len(partial["response"]["output"]) == 4

    (done,) = [r async for r in source.rollouts(partials=[json.loads(json.dumps(partial))])]
    assert "_ng_failure_class" not in done and done["reward"] == 1.0 and done["resumed_at_turn"] == 2
    assert [s["turns"] for s in done["segments"]] == [[0, 2], [2, 4]]
    assert done["response"]["output"][:4] == partial["response"]["output"], "what was paused is kept as it was"
    assert check_contiguity(done).ok and await model_calls("10:0") == 4, "no turn ran twice"


async def _all(batch: Any) -> list[dict[str, Any]]:
    return [r async for r in batch]


async def test_a_batch_paused_over_http_continues_over_http(url: str) -> None:
    held = gate()
    await held.close.remote()
    arrivals = await held.count.remote()
    async with GymClient(url) as client:
        batch = client.rollouts([row(3, task=20), row(2, task=21)])
        rows = asyncio.ensure_future(_all(batch))
        await parked(held, arrivals + 2, rows)
        assert await batch.pause() == 1
        await held.open.remote()
        partials = await asyncio.wait_for(rows, timeout=120)
        assert sorted((p["_ng_task_index"], p["partial"], p["turns"]) for p in partials) == [
            (20, True, 2),
            (21, True, 2),
        ]
        done = [r async for r in client.rollouts(partials=partials)]
    assert sorted((r["_ng_task_index"], r["reward"], r["resumed_at_turn"]) for r in done) == [
        (20, 1.0, 2),
        (21, 1.0, 2),
    ]
    assert all(check_contiguity(r).ok for r in done)


async def post(url: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as response:
        return response.status, await response.json()


async def test_what_cannot_be_paused_or_continued_is_refused_naming_why(url: str) -> None:
    status, body = await post(url, "/v1/rollouts/no-such-batch/pause")
    assert status == 404 and "no running batch `no-such-batch`" in body["error"]

    held = gate()
    await held.close.remote()
    arrivals = await held.count.remote()
    source = ServeRollouts(agents=[COUNTER, OTHER], default_agent=COUNTER)
    batch = source.rollouts([row(3, task=30)])
    rows = asyncio.ensure_future(_all(batch))
    await parked(held, arrivals + 1, rows)
    await batch.pause()
    await held.open.remote()
    (partial,) = await asyncio.wait_for(rows, timeout=120)

    def refused(change: Any) -> dict[str, Any]:
        copy = json.loads(json.dumps(partial))
        change(copy)
        return {"partials": [copy]}

    altered = refused(lambda p: p["response"]["output"][0]["generation_token_ids"].append(7))
    status, body = await post(url, "/v1/rollouts", altered)
    assert status == 422 and body["field"] == "partials.0.response.output.0.generation_token_ids"
    assert "altered since the rollout was paused" in body["error"]

    elsewhere = refused(lambda p: p.update(agent_ref={"name": OTHER}))
    status, body = await post(url, "/v1/rollouts", elsewhere)
    assert status == 422 and body["field"] == "partials.0.agent_ref.name" and f"paused on `{COUNTER}`" in body["error"]

    def other_policy(p: dict[str, Any]) -> None:
        p.update(agent_ref={"name": OTHER})
        p["_gs_checkpoint"]["agent"] = OTHER

    status, body = await post(url, "/v1/rollouts", refused(other_policy))
    assert status == 422 and body["field"] == "partials.0._gs_checkpoint.policy"
    assert (
        f"sampled by policy `{COUNTER}-model`, but application `{OTHER}` now samples from `{OTHER}-model`"
        in (body["error"])
    )
    with pytest.raises(Exception, match="altered since the rollout was paused"):
        [r async for r in source.rollouts(partials=altered["partials"])]


# ---- long-tail control for groups, on the synthetic model with heavy-tailed response lengths -------------------

TAIL = "tail"
HEAVY = {"distribution": "pareto", "min_tokens": 20, "alpha": 1.1, "max_tokens": 1500}


@pytest.fixture(scope="module")
def tail_app(url: str) -> str:
    model = {
        "kind": "synthetic",
        "recordings": ["example_single_tool_call"],
        "error_rate": 0.5,
        "lengths": HEAVY,
        "seconds_per_token": 0.0005,
    }
    args = {"environment": {"name": "synthetic_load"}, "model": model}
    serve.run(build_app(AppArgs.model_validate(args)), name=TAIL, route_prefix=None)
    return TAIL


def weather_rows(n: int) -> list[dict[str, Any]]:
    from gym_serve.testing.fixtures import example_rows

    return [{**r, "agent_ref": {"name": TAIL}} for r in example_rows("example_single_tool_call")[:n]]


def runs_of(rows: list[dict[str, Any]]) -> dict[int, list[list[dict[str, Any]]]]:
    """Each task's rows in the order they came, split where another task's row came between."""
    runs: dict[int, list[list[dict[str, Any]]]] = {}
    last = None
    for row in rows:
        task = row["_ng_task_index"]
        if task != last:
            runs.setdefault(task, []).append([])
        runs[task][-1].append(row)
        last = task
    return runs


@pytest.mark.parametrize("stragglers", ["masked", "partial"])
async def test_a_group_finishes_at_k_of_n_and_its_stragglers_are_masked_or_partials(
    tail_app: str, stragglers: str
) -> None:
    source = ServeRollouts(agents=[TAIL], default_agent=TAIL)
    policy = {"finish_at": 2, "stragglers": stragglers, "over_provision": 1}
    rows = [r async for r in source.rollouts(weather_rows(4), num_repeats=4, group_policy=policy)]
    for runs in runs_of(rows).values():
        members = [r for run in runs for r in run]
        group = [r for r in runs[0] if not (r.get("partial") or r.get("straggler"))]  # what came out together
        indices = [r["_ng_rollout_index"] for r in members]
        assert len(set(indices)) == len(indices) and set(indices) <= set(range(5)), "n + m rollouts, each once"
        finished = [r for r in group if "_ng_failure_class" not in r and not r.get("partial")]
        assert len(finished) >= 2 and all(r["reward"] in (0.0, 1.0) for r in finished)
        assert len(group) <= 4, "a group holds at most group_size rows"
        later = [r for r in members if r not in group]
        assert all(r.get("partial") or r.get("straggler") for r in later), "after its group: only stragglers"
        if stragglers == "masked":
            cut = [r for r in group if r.get("_ng_failure_class") == "straggler"]
            shown = [(r["_ng_rollout_index"], r.get("_ng_failure_class"), r.get("straggler")) for r in members]
            assert len(group) == 4 and all(r["mask_sample"] is True for r in cut), shown
            assert not any(r.get("partial") for r in members)
        else:
            assert len(members) == 5 and not any(r.get("_ng_failure_class") for r in members), "none is lost"
            assert all(r["mask_sample"] is True and "_gs_checkpoint" in r for r in members if r.get("partial"))


async def test_a_group_can_finish_once_its_rewards_differ(tail_app: str) -> None:
    source = ServeRollouts(agents=[TAIL], default_agent=TAIL)
    policy = {"until_rewards_differ": True, "stragglers": "masked"}
    rows = [r async for r in source.rollouts(weather_rows(6), num_repeats=6, group_policy=policy)]
    for runs in runs_of(rows).values():
        group = [r for r in runs[0] if not r.get("straggler")]
        finished = [r for r in group if "_ng_failure_class" not in r]
        cut = [r for r in group if r.get("_ng_failure_class") == "straggler"]
        assert len(finished) + len(cut) == len(group) == 6
        if cut:  # it closed early: its finished rollouts' rewards differ
            assert len({r["reward"] for r in finished}) == 2
    generated = await serve.get_deployment_handle("Model", app_name=TAIL).broadcast("stats").results_async()
    assert sum(s["generation_tokens"] for s in generated) > 0
