"""The Gateway tier through its handle, as a harness Agent uses it: open a rollout's session, close it.

Opens go to any replica (the less loaded of two); a close goes to the replica that holds the session (its
address names it: `gym_serve.calls.routing`). Both are micro-batched, as every handle call of an Agent is.
"""

from __future__ import annotations

import functools
from typing import Any

from ray.serve.handle import DeploymentHandle

from gym_serve.calls.batching import MicroBatcher
from gym_serve.calls.handles import KeyedSender
from gym_serve.calls.replica_count import replica_counts
from gym_serve.calls.routing import replica_key
from gym_serve.rollout.gateway_session import SessionAddress, SessionRecord, SessionSpec

__all__ = ["GATEWAY", "GatewayHandle"]

GATEWAY = "Gateway"
"""The deployment name of a harness application's Gateway tier."""


class GatewayHandle:
    """`gym_serve.rollout.gateway_session.GatewayClient` over the Gateway deployment's handle."""

    def __init__(self, handle: DeploymentHandle) -> None:
        sender = KeyedSender(handle, "batch")
        parts = functools.partial(replica_counts.of, handle.app_name, handle.deployment_name)
        self._open: MicroBatcher[tuple[Any, ...], Any] = MicroBatcher(
            lambda calls, key=None: sender(key)("open_session", calls), parts=parts, route=lambda call: None
        )
        self._close: MicroBatcher[tuple[Any, ...], Any] = MicroBatcher(
            lambda calls, key=None: sender(key)("close_session", calls), route=lambda call: replica_key(call[1])
        )

    async def open(self, spec: SessionSpec) -> SessionAddress:
        address: SessionAddress = await self._open((spec,))
        return address

    async def close(self, address: SessionAddress) -> SessionRecord:
        record: SessionRecord = await self._close((address.session_id, address.replica))
        return record
