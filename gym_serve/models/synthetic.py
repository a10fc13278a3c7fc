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
- `Lengths` and `Decoder`: how many tokens a response has (heavy-tailed, as a
  reasoning model's lengths are: most short, a few very long) and decoding them
  at a time per token, with a count of the tokens generated (those of a call
  cut short included), so a benchmark can set what was generated against what
  its rollouts delivered. `token_bundle` gives the call its ids, contiguous with
  the rollout's earlier calls as a token-exact tier's are.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Capacity", "Decoder", "Latency", "Lengths", "burn_cpu", "token_bundle"]


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


class Lengths(BaseModel):
    """Tokens per response: `fixed` at `min_tokens`, or a Pareto of shape `alpha` above `min_tokens` (the smaller
    `alpha`, the heavier the tail: 1.5 gives a mean of 3 × `min_tokens` and a p99 of ~21 ×), capped at `max_tokens`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    distribution: Literal["fixed", "pareto"] = "pareto"
    min_tokens: int = Field(default=16, ge=1)
    alpha: float = Field(default=1.5, gt=0.0)
    max_tokens: int = Field(default=4096, ge=1)

    def sample(self, rng: random.Random) -> int:
        if self.distribution == "fixed":
            return self.min_tokens
        return min(self.max_tokens, int(self.min_tokens * rng.paretovariate(self.alpha)))


class Decoder:
    """Decodes `tokens` at `seconds_per_token` each, counting what it generated (part of a call cancelled midway
    counts as far as it got)."""

    def __init__(self, seconds_per_token: float) -> None:
        self.seconds_per_token = seconds_per_token
        self.generated = 0

    async def decode(self, tokens: int) -> None:
        started = time.monotonic()
        try:
            await asyncio.sleep(tokens * self.seconds_per_token)
        except asyncio.CancelledError:
            so_far = (time.monotonic() - started) / self.seconds_per_token if self.seconds_per_token else tokens
            self.generated += min(tokens, int(so_far))
            raise
        self.generated += tokens


def token_bundle(items: list[dict[str, Any]], generated: int) -> dict[str, Any]:
    """A call's token fields for a conversation of `items`: the prompt extends the last call's prompt + generation
    by one id per item after it (the first call: one per item), then `generated` ids, each at log-prob -1.

    >>> first = token_bundle([{"role": "user", "content": "hi"}], 3)
    >>> first["prompt_token_ids"], first["generation_token_ids"]
    ([1], [2, 2, 2])
    >>> token_bundle([{"role": "user"}, first, {"type": "function_call_output"}], 1)["prompt_token_ids"]
    [1, 2, 2, 2, 1]
    """
    at = max((i for i, item in enumerate(items) if "generation_token_ids" in item), default=None)
    if at is None:
        prompt = [1] * len(items)
    else:
        last = items[at]
        prompt = [*last["prompt_token_ids"], *last["generation_token_ids"], *[1] * (len(items) - at - 1)]
    return {
        "prompt_token_ids": prompt,
        "generation_token_ids": [2] * generated,
        "generation_log_probs": [-1.0] * generated,
    }


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
