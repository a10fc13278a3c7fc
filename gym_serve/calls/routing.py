"""Session routing: the calls of one rollout reach the replica that holds its session.

A Serve request carries a routing key in `handle.options(session_id=...)`
(Ray Serve 2.60), and a deployment's request router reads it. `SessionRouter`:

- a key naming a replica (`replica_key(id)`, what an environment that keeps
  rollout state in replica memory stamps on the state it returns from `seed`)
  goes to that replica only, waiting while its queue is full; if that replica
  is gone, to any replica, which answers `session_lost`;
- any other key goes where Serve's consistent-hash ring puts it (the same
  replica for the same key, from every caller; a replica that comes or goes
  moves only its own share of the keys; a full primary overflows to the next
  replica of the ring): an Agent's model-call session buckets;
- no key: the less loaded of two random replicas (Serve's default policy),
  e.g. a rollout's first call.

Calls are micro-batched (`gym_serve.calls.batching`), and a batch is one
request: `MicroBatcher(route=...)` sends the calls of different keys in
different requests, so every call travels under its own key.

Session affinity for the Model tier: a rollout's second model call repeats the
first call's prompt and generation and adds a little; a vLLM replica that served
the first call still holds that history in its prefix cache, any other replica
computes it again. The Agent sends each model call under its rollout's *session
bucket* (`session_bucket`: a stable hash of the rollout's session id, modulo a
fixed number of buckets the tier asks for), so a rollout's calls reach one replica.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

from ray.serve.config import RequestRouterConfig
from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter

__all__ = [
    "REPLICA_KEY",
    "ROUTER",
    "SessionRouter",
    "pinned_key",
    "replica_key",
    "session_bucket",
    "session_router_config",
]

ROUTER = "gym_serve.calls.routing:SessionRouter"
"""The import path a deployment's `request_router_config` names."""

REPLICA_KEY = "_gs_replica"
"""The field of a rollout's environment state that names the replica holding its session."""

_REPLICA_PREFIX = "replica:"


def replica_key(replica: str) -> str:
    """The routing key that sends a request to the replica whose unique id is `replica`."""
    return _REPLICA_PREFIX + replica


def session_bucket(session: str, buckets: int) -> int:
    """The bucket of a session id: the same in every process (`hash()` of a str is salted per process).

    >>> session_bucket("12:3", 32) == session_bucket("12:3", 32)
    True
    >>> sorted({session_bucket(f"{task}:0", 4) for task in range(100)})
    [0, 1, 2, 3]
    """
    return zlib.crc32(session.encode()) % buckets


def pinned_key(state: Any) -> str | None:
    """The routing key of a rollout whose environment state names its replica; None for state that travels."""
    replica = state.get(REPLICA_KEY) if isinstance(state, dict) else None
    return replica_key(replica) if isinstance(replica, str) else None


class SessionRouter(ConsistentHashRouter):
    """Routes by `RequestMetadata.session_id`; see the module docstring."""

    async def choose_replicas(self, candidate_replicas: list[Any], pending_request: Any = None) -> list[list[Any]]:
        key = pending_request.metadata.session_id if pending_request is not None else ""
        if not key or not candidate_replicas:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        if key.startswith(_REPLICA_PREFIX):
            replica = key[len(_REPLICA_PREFIX) :]
            pinned = [r for r in candidate_replicas if r.replica_id.unique_id == replica]
            if not pinned:
                return [candidate_replicas]  # gone: whichever replica gets it answers `session_lost`
            pending_request.routing_context.should_backoff = True  # full: wait for it, never go elsewhere
            return [pinned]
        return await super().choose_replicas(candidate_replicas, pending_request)

    def _fulfill_next_pending_request(self, replica: Any, request_metadata: Any = None) -> None:
        """Give `replica` to exactly the request it was chosen for.

        Serve's router finds that request by its internal request id, but the
        requests a replica makes while serving one request all inherit that
        request's internal id (an Agent's `run_batch` runs many rollouts in one
        request). Matched by id, the replica chosen for one call went to another
        call of the same parent (a session's call to the wrong replica), and the
        call it was chosen for waited forever. The metadata object is the
        routed request's own, so match by identity.
        """
        for pending in self._pending_requests_to_fulfill:
            if pending.metadata is request_metadata:
                if not pending.future.done():
                    self._cancel_routing_task_for_pending_request(pending)
                    self._record_queue_wait_time(pending)
                    pending.future.set_result(replica)
                return


def session_router_config() -> RequestRouterConfig:
    """The `request_router_config` of a deployment whose callers route by session."""
    return RequestRouterConfig(request_router_class=SessionRouter)
