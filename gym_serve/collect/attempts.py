"""Attempts: the one retry path and the one failure row, shared by the rollout driver and the HTTP ingress.

A rollout is tried until it finishes, its failure is not worth another try, or
its attempts run out. Serve's back-pressure is a signal to slow down, not a
failure: waiting it out costs no attempt. Serve does not retry a request a
replica accepted, so retrying a replica's death is ours too.

Whatever could not finish becomes a *failure row*: the input row plus
`_ng_failure_class` (a `FailureKind`), `error`, `attempts` and
`mask_sample: true`, NeMo Gym's failures-sidecar shape.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from gym_serve.errors import FailureKind, failure_kind

__all__ = ["RETRYABLE", "Outcome", "RetryPolicy", "failure_row", "run_attempts"]

RETRYABLE = frozenset(
    {
        FailureKind.KILL_SHAPED,
        FailureKind.SESSION_LOST,
        FailureKind.AGENT_TIMEOUT,
        FailureKind.TRANSPORT_TIMEOUT,
        FailureKind.TRANSPORT_UNREACHABLE,
        FailureKind.MODEL_ERROR,
        FailureKind.STALE_POLICY,
    }
)
"""Failure kinds worth another attempt: the next try may land on a healthy replica or a recovered endpoint
(or, for a stale rollout, on the current policy)."""


class RetryPolicy(BaseModel):
    """How often and how long a rollout is tried."""

    max_attempts: int = Field(default=3, ge=1, description="Tries per rollout for retryable failures.")
    attempt_timeout_s: float | None = Field(default=None, gt=0, description="Deadline of one attempt.")
    deadline_s: float | None = Field(default=None, gt=0, description="Deadline of all attempts together.")
    backoff_base_s: float = Field(default=0.05, ge=0, description="The first retry waits up to twice this.")
    backoff_cap_s: float = Field(default=5.0, ge=0)
    max_backpressure_waits: int = Field(default=1_000, ge=0, description="Back-pressure waits before it counts.")

    def backoff_s(self, attempt: int, rng: random.Random) -> float:
        """Exponential backoff with jitter, capped."""
        return rng.uniform(0.5, 1.0) * min(self.backoff_cap_s, self.backoff_base_s * 2**attempt)


@dataclass
class Outcome:
    """How a rollout's attempts ended: its rollout row, or (with `kind` set) its failure row."""

    row: dict[str, Any]
    kind: FailureKind | None
    attempts: int
    retries: int = 0
    backpressure_waits: int = 0
    latency_s: float = 0.0
    """Of the attempt that finished."""
    stopped: bool = False
    """It was told to stop while an attempt failed: not tried again (its caller makes it a partial)."""
    partial: bool = False
    """`row` is a partial: the rollout stopped at a turn boundary, to be continued (`gym_serve.rollout.checkpoint`)."""

    @property
    def ok(self) -> bool:
        return self.kind is None


def failure_row(row: dict[str, Any], kind: FailureKind, error: str, attempts: int) -> dict[str, Any]:
    """The row a rollout that could not finish leaves in the failures file (and on the wire)."""
    return {**row, "_ng_failure_class": kind.value, "error": error, "attempts": attempts, "mask_sample": True}


async def run_attempts(
    call: Callable[[], Awaitable[dict[str, Any]]],
    row: dict[str, Any],
    policy: RetryPolicy,
    rng: random.Random,
    *,
    spent: int = 0,
    on_backpressure: Callable[[], None] | None = None,
    stopping: Callable[[], bool] | None = None,
) -> Outcome:
    """Run `call()` (one attempt at `row`'s rollout) until it finishes or gives up; never raises but cancellation.

    `spent` attempts were used before (a resumed collection). `on_backpressure`
    hears each back-pressure rejection, so the caller can shrink its window.
    `stopping()` true after a retryable failure: no more attempts (`Outcome.stopped`).
    """
    outcome = Outcome(row, None, spent)
    try:
        async with asyncio.timeout(policy.deadline_s):
            return await _attempts(call, row, policy, rng, outcome, on_backpressure, stopping)
    except TimeoutError:
        return _failed(
            outcome, FailureKind.AGENT_TIMEOUT, f"rollout did not finish within its deadline of {policy.deadline_s} s"
        )


async def _attempts(
    call: Callable[[], Awaitable[dict[str, Any]]],
    row: dict[str, Any],
    policy: RetryPolicy,
    rng: random.Random,
    outcome: Outcome,
    on_backpressure: Callable[[], None] | None,
    stopping: Callable[[], bool] | None,
) -> Outcome:
    while True:
        outcome.attempts += 1
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(call(), policy.attempt_timeout_s)
        except Exception as e:  # a failed attempt is data: name it, maybe try again, else a failure row
            kind = failure_kind(e)
            if kind is FailureKind.BACKPRESSURE and outcome.backpressure_waits < policy.max_backpressure_waits:
                outcome.attempts -= 1
                outcome.backpressure_waits += 1
                if on_backpressure is not None:
                    on_backpressure()
                await asyncio.sleep(policy.backoff_s(outcome.backpressure_waits, rng))
                continue
            if kind in RETRYABLE and stopping is not None and stopping():
                outcome.stopped = True
                return outcome
            if kind in RETRYABLE and outcome.attempts < policy.max_attempts:
                outcome.retries += 1
                await asyncio.sleep(policy.backoff_s(outcome.attempts, rng))
                continue
            if isinstance(e, TimeoutError):
                return _failed(outcome, kind, f"rollout attempt did not finish within {policy.attempt_timeout_s} s")
            return _failed(outcome, kind, str(e) or type(e).__name__)
        outcome.row, outcome.latency_s = result, time.perf_counter() - started
        return outcome


def _failed(outcome: Outcome, kind: FailureKind, error: str) -> Outcome:
    outcome.kind = kind
    outcome.row = failure_row(outcome.row, kind, error, outcome.attempts)
    return outcome
