"""The Gateway tier: per-rollout sessions that harness agents call as an OpenAI or Anthropic endpoint.

Each replica runs an HTTP server of its own (`.server`, on `host`:a free port and on a Unix socket) and holds
the sessions it opened. The Agent opens a session through the handle (any replica), the harness calls it over
HTTP, the Agent closes it through the handle, routed to the replica that holds it (`gym_serve.calls.routing`:
the address names the replica). Sessions' model calls go to the application's Model tier through the same
micro-batched, session-sticky handle client the tool-loop Agent uses, so every model kind serves harnesses.
A session whose Agent never closes it (the Agent replica died) ends after `session_idle_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from ray import serve
from ray.serve.handle import DeploymentHandle

from gym_serve.calls.autoscaling import METRIC
from gym_serve.calls.batching import stream_batch
from gym_serve.calls.handles import ModelHandle, model_handle
from gym_serve.calls.routing import ROUTER
from gym_serve.deployments.gateway.server import gateway_app
from gym_serve.deployments.gateway.sessions import Session
from gym_serve.errors import SessionLostError
from gym_serve.rollout.gateway_session import SessionAddress, SessionRecord, SessionSpec
from gym_serve.rollout.harness_config import GatewayOptions

__all__ = ["GatewayDeployment", "SOCKETS"]

DEFAULTS: dict[str, Any] = {
    "max_ongoing_requests": 1024,
    "ray_actor_options": {"num_cpus": 0},
    "request_router_config": {"request_router_class": ROUTER},
}
SOCKETS = Path(tempfile.gettempdir()) / "gym-serve-gateway"
"""Where each replica's Unix socket is: outside Ray's session folder, which a confined harness cannot see."""


@serve.deployment(name="Gateway")
class GatewayDeployment:
    """See the module docstring."""

    async def __init__(  # type: ignore[misc]  # Serve awaits an async __init__
        self, options: GatewayOptions, model: DeploymentHandle | None, model_app: str | None, affinity: bool
    ) -> None:
        self.options = options
        self.model = ModelHandle(model if model is not None else model_handle(model_app), affinity)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.sessions: dict[str, Session] = {}
        self.runner = web.AppRunner(gateway_app(self.sessions, self.model, options.max_body_bytes), access_log=None)
        await self.runner.setup()
        tcp = web.TCPSite(self.runner, options.host, 0, backlog=4096)
        await tcp.start()
        port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # bound to port 0: ask which
        host = options.host if options.host not in ("0.0.0.0", "::") else _node_address()
        self.base_url = f"http://{host}:{port}"
        SOCKETS.mkdir(parents=True, exist_ok=True)
        os.chmod(SOCKETS, 0o711)  # not listed; reached by its path, as a sandbox's user (`nobody`) binds it in
        self.socket = str(SOCKETS / f"{self.replica}.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        await web.UnixSite(self.runner, self.socket).start()
        os.chmod(self.socket, 0o666)  # what guards a session is its key, as on the TCP port
        self._reaping = asyncio.ensure_future(self._reap())

    async def open_session(self, spec: SessionSpec) -> SessionAddress:
        """A new session on this replica; its address carries its key (for the harness, never for a log)."""
        session = Session(spec, self.options, self.replica)
        self.sessions[session.id] = session
        return session.address(self.base_url, self.socket)

    async def close_session(self, session_id: str, replica: str | None = None) -> SessionRecord:
        """End a session (later calls get 404) and hand back its record (`replica`: where the caller routed it)."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise SessionLostError(f"gateway session {session_id} is not on replica {self.replica} (it ended)")
        return session.record()

    async def batch(self, method: str, calls: list[tuple[Any, ...]]) -> AsyncIterator[list[tuple[int, Any]]]:
        """Opens or closes of many rollouts in one streaming request (`gym_serve.calls.batching`)."""
        if method not in ("open_session", "close_session"):
            raise ValueError(f"`{method}` cannot be batched; batchable: open_session, close_session")
        async for item in stream_batch(getattr(self, method), calls):
            yield item

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Model calls in flight over this replica's sessions (`gym_serve.calls.autoscaling`)."""
        return {METRIC: float(sum(s.in_flight for s in self.sessions.values()))}

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(60.0, self.options.session_idle_s))
            idle = time.monotonic() - self.options.session_idle_s
            for session_id in [s.id for s in self.sessions.values() if s.touched < idle and s.in_flight == 0]:
                self.sessions.pop(session_id, None)

    async def __del__(self) -> None:
        self._reaping.cancel()
        await self.runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)


def _node_address() -> str:
    import ray

    return str(ray.util.get_node_ip_address())
