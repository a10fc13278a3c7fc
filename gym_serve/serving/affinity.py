"""Session affinity: all model calls of one rollout go to the same replica, so its prefix cache is reused.

A rollout's second model call repeats the first call's prompt and generation
and adds a little; a vLLM replica that served the first call still holds that
history in its prefix cache, any other replica computes it again. Serve's
default router picks replicas by load alone, so a multi-turn rollout lands on a
random replica at every turn.

Model calls travel in micro-batches (`gym_serve.serving.batching`), and Serve
routes a batch, not a call. So the caller splits each turn's calls by *session
bucket* (`session_bucket`: a stable hash of the rollout's session id, modulo a
fixed number of buckets) and sends each part with its bucket as the Serve
`session_id`.
`SessionAffinityRouter`, the Model deployment's request router, is Serve's
consistent-hash router (`ray.serve.experimental.consistent_hash_router`): the
same bucket always goes to the same replica while it runs, a replica that comes
or goes moves only its own share of the buckets, every caller process agrees
without shared state, and a full primary (at `max_ongoing_requests`) overflows
to the next replica of the ring, so affinity never stalls a call. One change:
a request without a session id is routed as Serve's default router routes it
(the shorter queue of two random replicas) instead of by a hash of its random
request id, so the tier's unbucketed calls (the ingress's `/v1/responses`, a
trainer's probes) keep their load balancing.

This router matches a chosen replica to its request by Serve's internal request
id, which a handle call made inside a replica inherits from the request it
serves: `MicroBatcher` sends each batch from a fresh context so that the
requests of one flush do not share one id.
"""

from __future__ import annotations

import random
import zlib

from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter
from ray.serve.request_router import PendingRequest, RunningReplica

__all__ = ["ROUTER", "SessionAffinityRouter", "session_bucket"]

ROUTER = "gym_serve.serving.affinity:SessionAffinityRouter"
"""The import path a deployment's `request_router_config` names."""


def session_bucket(session: str, buckets: int) -> int:
    """The bucket of a session id: the same in every process (`hash()` of a str is salted per process).

    >>> session_bucket("12:3", 32) == session_bucket("12:3", 32)
    True
    >>> sorted({session_bucket(f"{task}:0", 4) for task in range(100)})
    [0, 1, 2, 3]
    """
    return zlib.crc32(session.encode()) % buckets


class SessionAffinityRouter(ConsistentHashRouter):
    """Consistent hashing of the session id; without one, the shorter queue of two random replicas."""

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if pending_request is not None and pending_request.metadata.session_id:
            ranks: list[list[RunningReplica]] = await super().choose_replicas(candidate_replicas, pending_request)
            return ranks
        return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
