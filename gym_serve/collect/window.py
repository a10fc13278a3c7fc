"""`AdaptiveWindow`: how many rollouts may be in flight, shrinking when Serve pushes back.

Ray Serve's router retries rejected requests with a backoff, and throughput
collapses when callers send far more than the replicas accept. So the
dispatcher keeps its in-flight count under a window sized to the agent tier's
capacity, and treats a `BackPressureError` as a signal: the window halves at
once and grows back by one slot per window's worth of successes (additive
increase, multiplicative decrease, as TCP does).

Waiters queue in order, and a freed slot goes to exactly one of them: a door
may start many rollouts at once without each release waking every waiter.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["AdaptiveWindow"]


class AdaptiveWindow:
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be at least 1, got {size}")
        self.max_size = size
        self.limit = float(size)
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        """Wait for a free slot under the current limit, then take it (first come, first served)."""
        if not self._waiters and self.in_flight < int(self.limit):
            self.in_flight += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # `_wake` took the slot for us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as we gave up: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def on_success(self) -> None:
        self.limit = min(float(self.max_size), self.limit + 1.0 / self.limit)
        self._wake()

    def on_backpressure(self) -> None:
        self.limit = max(1.0, self.limit / 2)

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
