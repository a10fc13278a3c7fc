"""A test environment whose one tool waits at a gate the test opens: a rollout can be held between two model calls.

The gate is a named Ray actor, so the test process and the environment replica share it; it counts the calls
that reached it, so a test knows a rollout is parked (its first model call done) and how many attempts came by.
"""

from __future__ import annotations

import asyncio

import ray

from gym_serve import Environment, Response, tool

GATE = "gym-serve-test-gate"


@ray.remote(num_cpus=0)
class Gate:
    def __init__(self) -> None:
        self._open = asyncio.Event()
        self.arrivals = 0
        self.waiters: list[str] = []

    async def wait(self, who: str = "") -> None:
        self.arrivals += 1
        self.waiters.append(who)
        await self._open.wait()

    async def who(self) -> list[str]:
        """Who reached the gate, in order (what each waiter said it was: a replica's id, say)."""
        return self.waiters

    async def open(self) -> None:  # async like `wait`: the event lives in the actor's event loop
        self._open.set()

    async def close(self) -> None:
        self._open.clear()

    async def count(self) -> int:
        return self.arrivals


def gate() -> ray.actor.ActorHandle:
    """The one gate of the Ray instance (detached: a non-detached named actor is not shared across jobs here)."""
    return Gate.options(  # type: ignore[attr-defined]
        name=GATE, namespace="gym_serve_tests", lifetime="detached", get_if_exists=True
    ).remote()


class Parked(Environment):
    @tool
    async def park(self, ticket: str) -> str:
        """Wait until the gate opens.

        Args:
            ticket: Anything.
        """
        await gate().wait.remote()
        return "passed"

    async def verify(self, task: object, response: Response, state: None) -> float:
        return 1.0
