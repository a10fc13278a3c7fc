"""`AdaptiveWindow`: how many rollouts may be in flight, shrinking when Serve pushes back.

Ray Serve's router retries rejected requests with a backoff, and throughput
collapses when callers send far more than the replicas accept. So the driver
keeps its in-flight count under a window sized to the agent tier's capacity,
and treats a `BackPressureError` as a signal: the window halves at once and
grows back by one slot per window's worth of successes (additive increase,
multiplicative decrease, as TCP does).
"""

from __future__ import annotations

import asyncio

__all__ = ["AdaptiveWindow"]


class AdaptiveWindow:
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be at least 1, got {size}")
        self.max_size = size
        self.limit = float(size)
        self.in_flight = 0
        self._changed = asyncio.Condition()

    async def acquire(self) -> None:
        """Wait for a free slot under the current limit, then take it."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < int(self.limit))
            self.in_flight += 1

    async def release(self) -> None:
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()

    def on_success(self) -> None:
        self.limit = min(float(self.max_size), self.limit + 1.0 / self.limit)

    def on_backpressure(self) -> None:
        self.limit = max(1.0, self.limit / 2)
