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
`session_id`. `SessionAffinityRouter`, the Model deployment's request router,
ranks the replicas by rendezvous hashing of that id: the same bucket always
goes to the same replica while it runs, a replica that comes or goes moves only
its own buckets, and every caller process agrees without sharing state. A full
primary (at `max_ongoing_requests`) overflows to the next replica in the
ranking, so affinity never stalls a call. Requests without a session id are
routed as Serve's default router routes them (the shorter queue of two random
replicas).

Rendezvous hashing rather than Serve's experimental `ConsistentHashRouter`:
that router hashes requests without a session id at random, ignoring load,
and a deployment has one router, so the vLLM tier's unbucketed calls (the
ingress's `/v1/responses`, a trainer's probes) would lose load balancing.
"""

from __future__ import annotations

import hashlib
import random
import zlib

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

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


class SessionAffinityRouter(RequestRouter):
    """Routes a request with a session id to its rendezvous-hash replica, falling back down the same ranking.

    `request_router_kwargs`: `fallbacks`, how many further replicas of the ranking
    may take a request its primary has no room for (default 1).
    """

    def initialize_state(self, fallbacks: int = 1) -> None:
        self._fallbacks = fallbacks

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        session = pending_request.metadata.session_id if pending_request is not None else None
        if not session or not candidate_replicas:  # no affinity asked for: the shorter queue of two
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        assert pending_request is not None
        pending_request.routing_context.should_backoff = True  # all ranks full: back off, then the same order
        ranked = sorted(candidate_replicas, key=lambda r: _score(session, r.replica_id.unique_id), reverse=True)
        return [[replica] for replica in ranked[: 1 + self._fallbacks]]


def _score(key: str, replica: str) -> int:
    """Rendezvous (highest-random-weight) score of a replica for a key."""
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{replica}".encode(), digest_size=8).digest(), "big")
