"""Synthetic load: latency, CPU time and per-replica capacity you can dial in. For benchmarks and tests only.

The synthetic model (`model: {kind: synthetic}`) and the `synthetic_load`
environment use these to stand in for a slow model, a slow tool or an
expensive verifier, so a benchmark measures the system rather than a model.

- `Latency`: fixed, or drawn from a lognormal with the same mean (a long tail,
  as real model and sandbox latencies have).
- `Capacity`: at most N calls at once per replica, as a vLLM replica's batch or a
  pool of sandboxes would allow; the rest wait their turn inside the replica.
- `burn_cpu`: CPU time spent in one worker thread per replica, on work that
  releases the GIL (hashing), so the replica's event loop keeps answering and
  one replica uses at most one core, as a real CPU-bound verifier would.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Capacity", "Latency", "burn_cpu"]


class Latency(BaseModel):
    """A delay per call: `mean_s`, either fixed or lognormal with spread `sigma` (same mean)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean_s: float = Field(default=0.0, ge=0.0)
    distribution: Literal["fixed", "lognormal"] = "fixed"
    sigma: float = Field(default=1.0, gt=0.0, description="Lognormal shape; 1.0 gives p99 ≈ 6× the median.")

    def sample(self, rng: random.Random) -> float:
        if self.mean_s == 0.0 or self.distribution == "fixed":
            return self.mean_s
        mu = math.log(self.mean_s) - self.sigma**2 / 2  # so that E[delay] = mean_s
        return rng.lognormvariate(mu, self.sigma)

    async def wait(self, rng: random.Random) -> None:
        delay = self.sample(rng)
        if delay > 0:
            await asyncio.sleep(delay)


class Capacity:
    """At most `limit` calls at once (None: unlimited). Asyncio primitives bind to one loop: make it in the replica."""

    def __init__(self, limit: int | None) -> None:
        self._slots = asyncio.Semaphore(limit) if limit else None

    async def __aenter__(self) -> None:
        if self._slots is not None:
            await self._slots.acquire()

    async def __aexit__(self, *exc: object) -> None:
        if self._slots is not None:
            self._slots.release()


_cpu_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="synthetic-cpu")
_BLOCK = b"\0" * (1 << 16)


def _spin(seconds: float) -> None:
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        hashlib.sha256(_BLOCK).digest()  # releases the GIL for inputs this large


async def burn_cpu(ms: float) -> None:
    """Spend `ms` of CPU time in this process's one CPU worker thread."""
    if ms > 0:
        await asyncio.get_running_loop().run_in_executor(_cpu_worker, _spin, ms / 1000)
