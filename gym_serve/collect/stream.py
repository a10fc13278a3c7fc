"""Rollouts streamed to a trainer in the same Ray cluster: the driver's dispatch without the files.

A trainer that runs in the cluster (an actor, or a script on a cluster node)
does not need the HTTP ingress: `ServeRollouts.rollouts` sends rows to the
agent applications through the same micro-batched handles the driver uses
(`gym_serve.calls.batching.agent_batcher`), with the same retries and failure
rows (`gym_serve.collect.attempts`), and yields rollouts as they finish. It has
the client's `rollouts` signature, so the trainer adapters take either.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable
from typing import Any

from gym_serve.calls.batching import MicroBatcher
from gym_serve.calls.handles import agent_batcher
from gym_serve.collect.attempts import RetryPolicy, run_attempts
from gym_serve.errors import InputError

__all__ = ["ServeRollouts"]


class ServeRollouts:
    """Runs rollout rows on deployed agent applications (by `agent_ref.name`, else `default_agent`)."""

    def __init__(
        self,
        *,
        default_agent: str | None = None,
        policy: RetryPolicy | None = None,
        max_in_flight: int = 256,
        seed: int | None = None,
    ) -> None:
        self.default_agent = default_agent
        self.policy = policy or RetryPolicy(max_attempts=3, attempt_timeout_s=600.0)
        self.max_in_flight = max_in_flight
        self._rng = random.Random(seed)
        self._batchers: dict[str, MicroBatcher[dict[str, Any], dict[str, Any]]] = {}

    async def __aenter__(self) -> ServeRollouts:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def rollouts(
        self,
        rows: Iterable[dict[str, Any]],
        *,
        num_repeats: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Rollouts of `rows` × `num_repeats` (sampling overrides merged into each row), as they finish."""
        overrides = {
            k: v
            for k, v in {"temperature": temperature, "top_p": top_p, "max_output_tokens": max_output_tokens}.items()
            if v is not None
        }
        work = []
        for index, row in enumerate(rows):
            agent = self._agent_of(row, index)
            params = {**row["responses_create_params"], **overrides}
            task = row.get("_ng_task_index", index)
            for k in range(num_repeats):
                work.append(
                    (
                        agent,
                        {
                            **row,
                            "responses_create_params": params,
                            "agent_ref": {"name": agent},
                            "_ng_task_index": task,
                            "_ng_rollout_index": k,
                        },
                    )
                )
        slots = asyncio.Semaphore(self.max_in_flight)

        async def one(agent: str, row: dict[str, Any]) -> dict[str, Any]:
            async with slots:
                batcher = self._batchers.get(agent)
                if batcher is None:
                    batcher = self._batchers[agent] = agent_batcher(agent)
                outcome = await run_attempts(lambda: batcher(row), row, self.policy, self._rng)
                return outcome.row

        tasks = [asyncio.ensure_future(one(agent, row)) for agent, row in work]
        try:
            for finished in asyncio.as_completed(tasks):
                yield await finished
        finally:
            for task in tasks:
                task.cancel()

    def _agent_of(self, row: dict[str, Any], index: int) -> str:
        if not isinstance(row.get("responses_create_params"), dict):
            raise InputError("a row must be an object with `responses_create_params`", line=index + 1)
        name = (row.get("agent_ref") or {}).get("name") or self.default_agent
        if not name:
            raise InputError("no `agent_ref.name` and no default agent", line=index + 1, field="agent_ref")
        return str(name)
