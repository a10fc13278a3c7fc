"""How many replicas of each deployment are running, so a micro-batch can be split across them.

A micro-batch is one Serve request, and Serve routes a request to one replica.
When a tier has several replicas and its replicas have a fixed capacity (a
pool of sandboxes, a GPU batch), one replica would get a whole turn's calls
while the others idle. So callers split each batch into one part per running
replica (`MicroBatcher(parts=...)`) and Serve's router spreads the parts.

The counts come from `serve.status()`, refreshed every `every_s` in a
background thread: one controller call per process per refresh, whatever the
number of deployments asked about. Until the first answer every deployment
counts as one replica.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["ReplicaCounts", "replica_counts"]

log = logging.getLogger(__name__)


class ReplicaCounts:
    def __init__(self, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self._counts: dict[tuple[str, str], int] = {}
        self._task: asyncio.Task[None] | None = None

    def of(self, app: str, deployment: str) -> int:
        """RUNNING replicas of `app`'s `deployment` as last seen (at least 1); call from an event loop."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._refresh())
        return self._counts.get((app, deployment), 1)

    async def _refresh(self) -> None:
        from ray import serve

        while True:
            try:
                status = await asyncio.to_thread(serve.status)
            except Exception as e:  # the controller restarting: keep the last counts
                log.debug("serve.status() failed, keeping the last replica counts: %s", e)
            else:
                self._counts = {
                    (app_name, name): max(1, d.replica_states.get("RUNNING", 0))
                    for app_name, app in status.applications.items()
                    for name, d in app.deployments.items()
                }
            await asyncio.sleep(self.every_s)


replica_counts = ReplicaCounts()
"""The process's one instance (a Serve replica or the driver actor runs one event loop)."""
