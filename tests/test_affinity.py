"""Session affinity on real Serve deployments: a rollout's model calls, micro-batched by an agent-side caller,
all reach one replica of a two-replica tier routed by `SessionRouter`; without affinity they do not.

The model here is a light stand-in deployment (it answers with its replica id): what is under test is the
routing and the batching, through real handles, routers and replicas.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from ray import serve

from gym_serve.calls.batching import BatchedResponses
from gym_serve.calls.handles import ModelHandle
from gym_serve.calls.routing import ROUTER, session_bucket
from gym_serve.testing.fixtures import unique

pytestmark = [pytest.mark.serve, pytest.mark.usefixtures("serve_instance")]

SESSIONS, TURNS = 24, 4


@serve.deployment(
    num_replicas=2,
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 0},
    request_router_config={"request_router_class": ROUTER},
)
class Where(BatchedResponses):
    def __init__(self) -> None:
        self.me = serve.get_replica_context().replica_id.unique_id

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"replica": self.me, "session": session}

    async def affinity_buckets(self) -> int:
        return 8


@serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
class Turns:
    """Runs rollouts' turns the way an Agent replica does: every model call through one `ModelHandle`."""

    def __init__(self, model: Any, affinity: bool) -> None:
        self.model = ModelHandle(model, affinity)

    async def call(self, session: str | None) -> str:
        response = await self.model.responses({"input": "hi"}, session)
        return str(response["replica"])


async def both_replicas_known(turns: Any) -> None:
    """Wait until the caller's router has heard of both replicas.

    `serve.run` returns once both replicas are up, but the Turns replica's router learns of them by long poll,
    one at a time; calls routed before it knows the second all land on the first (CI saw exactly that).
    Calls without a session go to either known replica, so both answering means both are known.
    """
    answered: set[str] = set()
    for _ in range(600):
        answered.add(await asyncio.wait_for(turns.call.remote(None), timeout=60))
        if len(answered) == 2:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {answered} of the two replicas ever answered")


async def replicas_per_session(affinity: bool) -> dict[str, set[str]]:
    turns = serve.run(Turns.bind(Where.bind(), affinity), name=unique("affinity"), route_prefix=None)
    await both_replicas_known(turns)
    seen: dict[str, set[str]] = collections.defaultdict(set)
    sessions = [f"{task}:0" for task in range(SESSIONS)]
    for _ in range(TURNS):  # every session's next turn at once, as rollouts move in step
        answers = await asyncio.wait_for(asyncio.gather(*(turns.call.remote(s) for s in sessions)), timeout=60)
        for session, replica in zip(sessions, answers, strict=True):
            seen[session].add(replica)
    return seen


async def test_with_affinity_every_call_of_a_session_reaches_one_replica_and_both_replicas_work() -> None:
    seen = await replicas_per_session(affinity=True)
    assert all(len(replicas) == 1 for replicas in seen.values()), {s: r for s, r in seen.items() if len(r) > 1}
    assert len(set().union(*seen.values())) == 2, "the buckets spread over both replicas"
    by_bucket: dict[int, set[str]] = collections.defaultdict(set)
    for session, replicas in seen.items():
        by_bucket[session_bucket(session, 8)] |= replicas
    assert all(len(replicas) == 1 for replicas in by_bucket.values()), "a bucket is the routing key"


async def test_without_affinity_a_session_lands_wherever_the_load_sends_it() -> None:
    seen = await replicas_per_session(affinity=False)
    assert any(len(replicas) == 2 for replicas in seen.values()), "default routing is not sticky"
