"""What an Agent and a Gateway replica exchange about a session: the request, the address, the record.

The Agent opens a session for a rollout (`SessionSpec`) and gets its address (`SessionAddress`: the URL
prefix, the key, the replica that holds it); the harness calls it; the Agent closes it and takes its record
(`SessionRecord`). `GatewayClient` is the Agent's side of that, over Serve handles in a deployment
(`gym_serve.calls.gateway`) and over anything else in tests.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from gym_serve.rollout.harness_config import SamplingBounds

__all__ = ["GatewayClient", "SessionAddress", "SessionRecord", "SessionSpec"]


class SessionSpec(BaseModel):
    """What the Agent asks for: the model name the harness uses, the bounds, the rollout's own sampling."""

    model: str
    sampling: SamplingBounds = Field(default_factory=SamplingBounds)
    rollout_sampling: dict[str, Any] = Field(default_factory=dict, description="The row's temperature / top_p.")
    affinity: str | None = Field(default=None, description="The rollout's id: its calls stick to one model replica.")


class SessionAddress(BaseModel):
    """Where a session is: its id, its secret, the replica holding it, and how to reach that replica."""

    session_id: str
    key: str = Field(repr=False)
    replica: str
    base_url: str
    """`http://HOST:PORT` of the replica's HTTP server; the session's APIs are under `/sessions/<id>/v1`."""
    socket: str | None
    """The replica's Unix socket (the same server), for programs confined to a network of their own."""

    def prefix(self, root: str | None = None) -> str:
        """The session's URL prefix on `root` (default: `base_url`): the Anthropic SDK's base URL."""
        return f"{root or self.base_url}/sessions/{self.session_id}"


class SessionRecord(BaseModel):
    """What a closed session hands back: the rollout output, per-segment sequences, the calls, the errors."""

    output: list[dict[str, Any]]
    sequences: list[dict[str, Any]]
    summary: dict[str, Any]
    calls: int
    reply: str
    errors: list[dict[str, Any]] = Field(default_factory=list)
    """The Model tier's failures during the session: `{call, kind, message}` (the first decides a failed rollout)."""


class GatewayClient(Protocol):
    async def open(self, spec: SessionSpec) -> SessionAddress: ...

    async def close(self, address: SessionAddress) -> SessionRecord: ...
