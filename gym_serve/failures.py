"""Failure classes: what went wrong with a rollout, and whether to try again.

Every exception that escapes a rollout is mapped to one `_ng_failure_class`,
the key NeMo Gym's failure sidecar uses. Ray's own exceptions are recognised
without importing Ray here, so this module stays usable in Ray-free code.
"""

from __future__ import annotations

import asyncio

from gym_serve.errors import InputError, RolloutError

__all__ = ["RETRYABLE", "classify"]

RETRYABLE = frozenset({"replica_died", "backpressure", "timeout", "model_error"})
"""Failure classes worth another attempt: the next try may land on a healthy replica."""

_RAY_CLASSES = {
    "ActorDiedError": "replica_died",
    "ActorUnavailableError": "replica_died",
    "RayActorError": "replica_died",
    "ReplicaUnavailableError": "replica_died",
    "DeploymentUnavailableError": "replica_died",
    "BackPressureError": "backpressure",
    "GetTimeoutError": "timeout",
}


def classify(exc: BaseException, default: str = "agent_error") -> str:
    """The failure class of `exc` (`default` when nothing more specific is known)."""
    if isinstance(exc, RolloutError):
        return exc.failure_class
    if isinstance(exc, InputError):
        return "bad_input"
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout"
    for cls in type(exc).__mro__:
        if cls.__name__ in _RAY_CLASSES:
            return _RAY_CLASSES[cls.__name__]
    return default
