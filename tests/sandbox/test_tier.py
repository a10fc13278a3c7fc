"""The Sandbox tier on real Serve: `sandbox:` in an application's args, routing to the replica that holds a sandbox,
that replica's death as `session_lost`, and autoscaling on live sandboxes."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
import ray
from ray import serve

from gym_serve.calls.autoscaling import live_sandboxes_policy
from gym_serve.calls.routing import replica_key, session_router_config
from gym_serve.calls.sandboxes import Holder, SandboxTierClient
from gym_serve.deployments.app import build_app
from gym_serve.deployments.sandbox import SandboxDeployment
from gym_serve.environment.workspace import workspace_errors
from gym_serve.errors import ConfigError, FailureKind, SessionLostError, failure_kind
from gym_serve.sandbox import LocalProvider, SandboxGone
from gym_serve.serving.config import SandboxArgs, validate_app_args
from gym_serve.testing.fixtures import unique
from tests.sandbox.attacks import BASE
from tests.sandbox.leftovers import left, mounts
from tests.verifiers.callers import processes_with

pytestmark = pytest.mark.asyncio(loop_scope="module")


def replica_actors(app: str, deployment: str) -> list[str]:
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    return [n for n in names if n.startswith(f"SERVE_REPLICA::{app}#{deployment}#")]


async def test_sandbox_args_are_checked_with_the_file_and_key() -> None:
    args = {
        "environment": {"name": "swe_fix"},
        "sandbox": {"warm": 1, "limits": {"memory_mb": 512, "network": "none"}},
    }
    parsed = validate_app_args(args, source="apps.yaml", app="swe")
    assert parsed.sandbox is not None and parsed.sandbox.sandbox_limits().network == "none"
    with pytest.raises(ConfigError, match=r"apps.yaml, key `applications\[swe\].args.sandbox.limits`.*memory_gb"):
        validate_app_args({**args, "sandbox": {"limits": {"memory_gb": 1}}}, source="apps.yaml", app="swe")
    with pytest.raises(ConfigError, match=r"args.sandbox.limits`.*network must be"):
        validate_app_args({**args, "sandbox": {"limits": {"network": "host"}}}, source="apps.yaml", app="swe")


async def test_the_policy_asks_for_live_sandboxes_over_the_target() -> None:
    config = SimpleNamespace(get_target_ongoing_requests=lambda: 4)
    ctx = SimpleNamespace(aggregated_metrics={"live_sandboxes": {"a": 7.0, "b": 3.0}}, config=config)
    assert live_sandboxes_policy(ctx)[0] == 2.5  # type: ignore[arg-type]
    before = SimpleNamespace(aggregated_metrics={}, total_num_requests=8, config=config)
    assert live_sandboxes_policy(before)[0] == 2.0  # type: ignore[arg-type]


@pytest.mark.serve
@pytest.mark.timeout(300)
async def test_calls_reach_the_replica_holding_the_sandbox_and_its_death_is_session_lost(
    serve_instance: None,
) -> None:
    name = unique("sandbox-tier")
    options = {
        "num_replicas": 2,
        "request_router_config": session_router_config(),
        "ray_actor_options": {"num_cpus": 0},
    }
    handle = serve.run(SandboxDeployment.options(**options).bind(SandboxArgs(warm=1)), name=name, route_prefix=None)
    client = SandboxTierClient(handle)
    sandboxes: list[str] = []
    for _ in range(4):  # creates go to the less loaded of two random replicas: both get some
        sandboxes += await asyncio.gather(*(client.create(BASE) for _ in range(3)))
    replicas = {sandbox.split("/")[0] for sandbox in sandboxes}
    assert len(replicas) == 2
    await asyncio.gather(*(client.write_file(s, "mine.txt", s.encode()) for s in sandboxes))
    seen = await asyncio.gather(*(client.exec(s, "cat mine.txt") for s in sandboxes))
    assert [done.stdout for done in seen] == sandboxes, "every call reached the replica holding its sandbox"
    stats = {r: await handle.options(session_id=replica_key(r)).stats.remote() for r in replicas}
    assert {r: s["live"] for r, s in stats.items()} == {r: sum(x.startswith(r) for x in sandboxes) for r in replicas}

    victim = sorted(replicas)[0]
    mine = [s for s in sandboxes if s.startswith(victim)]
    others = [s for s in sandboxes if not s.startswith(victim)]
    before = mounts()
    await client.exec(mine[0], f"sleep {stats[victim]['tag']}1 & sleep {stats[victim]['tag']}1 &")
    actor = next(a for a in replica_actors(name, "Sandbox") if a.endswith(victim))
    ray.kill(ray.get_actor(actor, namespace="serve"), no_restart=False)
    deadline = time.monotonic() + 60  # ray.kill returns at once: a call made before the replica is gone still lands
    while await asyncio.to_thread(processes_with, stats[victim]["tag"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)  # its keeper and sandboxes end with it (what is still there after is asserted below)
    with pytest.raises(SandboxGone):
        await client.exec(mine[0], "true")
    with pytest.raises(SessionLostError) as lost:
        with workspace_errors("a tool of the rollout"):
            await client.exec(mine[1], "true")
    assert failure_kind(lost.value) is FailureKind.SESSION_LOST
    assert [(await client.exec(s, "cat mine.txt")).stdout for s in others] == others, "the other replica serves on"
    gone = await asyncio.to_thread(left, (stats[victim]["tag"],), before)
    assert set(gone) <= {"cgroups"}, gone  # no process or mount of the dead replica's sandboxes is left
    serve.delete(name)
    async with LocalProvider(warm=0) as sweeper:  # the next provider on the machine sweeps a dead one's cgroups
        await sweeper.create(BASE)
    assert await asyncio.to_thread(left, tuple(s["tag"] for s in stats.values()), before) == {}


def sandbox_replicas(app: str) -> int:
    deployment = serve.status().applications[app].deployments["Sandbox"]
    return int(deployment.replica_states.get("RUNNING", 0))


@pytest.mark.serve
@pytest.mark.timeout(300)
async def test_sandbox_args_add_a_tier_that_scales_on_live_sandboxes(serve_instance: None) -> None:
    name = unique("sandbox-scale")
    autoscaling = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2, "upscale_delay_s": 0.5}
    args: dict[str, Any] = {
        "environment": {"name": "swe_fix", "deployment": {"ray_actor_options": {"num_cpus": 0}}},
        "sandbox": {"warm": 0, "deployment": {"autoscaling_config": autoscaling}},
    }
    serve.run(build_app(args), name=name, route_prefix=None)
    client = SandboxTierClient(serve.get_deployment_handle("Sandbox", app_name=name))
    assert sandbox_replicas(name) == 1
    sandboxes = [await client.create(BASE) for _ in range(4)]  # idle, but held: 4 live sandboxes, target 2 each
    deadline = time.monotonic() + 120
    while sandbox_replicas(name) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert sandbox_replicas(name) == 2, "the tier scaled on what it holds, with no request in flight"
    for sandbox in sandboxes:
        await client.destroy(sandbox)
    serve.delete(name)


@ray.remote(num_cpus=0)
class _Agent:
    """An actor standing for the Agent replica that holds a rollout's sandbox."""


@pytest.mark.serve
@pytest.mark.timeout(300)
async def test_the_sandboxes_of_a_holder_that_died_are_reaped(serve_instance: None) -> None:
    name = unique("sandbox-holder")
    options = {"request_router_config": session_router_config(), "ray_actor_options": {"num_cpus": 0}}
    handle = serve.run(SandboxDeployment.options(**options).bind(SandboxArgs(warm=0)), name=name, route_prefix=None)
    client = SandboxTierClient(handle)
    holder, other = _Agent.remote(), _Agent.remote()  # type: ignore[attr-defined]
    await holder.__ray_ready__.remote()
    await other.__ray_ready__.remote()
    held = [await client.create(BASE, holder=Holder(holder)) for _ in range(2)]
    kept = await client.create(BASE, holder=Holder(other))
    await asyncio.sleep(2.0)  # a sweep with the holder alive keeps its sandboxes
    assert (await client.exec(held[0], "echo alive")).stdout == "alive\n"
    ray.kill(holder)
    deadline = time.monotonic() + 30
    while (await handle.stats.remote())["live"] > 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    for sandbox in held:
        with pytest.raises(SandboxGone):
            await client.exec(sandbox, "true")
    assert (await client.exec(kept, "echo kept")).stdout == "kept\n"
    ray.kill(other)
    serve.delete(name)
