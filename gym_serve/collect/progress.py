"""One rollout's progress across its attempts, and the agents' side of stopping and continuing rollouts.

The dispatcher keeps a `RolloutRun` for every rollout it runs. The Agent reports each completed turn
(`gym_serve.rollout.checkpoint`); the run folds the records into its checkpoint and hands each to the door's
journal (a file collection's `gym_serve.collect.journal`). Every attempt is sent with the instructions
`attempt_row` writes: resume from the checkpoint, report turns, and stop when one of the run's keys is stopped.
So a retried attempt (a replica died, a tier timed out, the rollout's session was lost) goes on from the last
completed turn, and a run told to stop comes back as a partial (`partial`) or, cut at once, as a masked row
(`masked`).

`AgentControl` is what the dispatcher asks the agent applications: stop rollouts (a broadcast to every Agent
replica), the policy an agent samples from (its Model tier's application, what a partial is bound to), and
that policy's current version. `ServeAgents` asks them through Serve.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from gym_serve.collect.attempts import failure_row
from gym_serve.errors import FailureKind
from gym_serve.rollout.checkpoint import RUN, Checkpoint, partial_row

if TYPE_CHECKING:
    from gym_serve.collect.dispatch import Rollout

__all__ = ["AgentControl", "OnRecord", "RolloutRun", "ServeAgents", "Stop"]

OnRecord = Callable[[tuple[str, int, int], dict[str, Any]], None]
"""Hears `(rollout key, turn record)` for every turn a rollout completes: a collection's journal."""


class Stop(StrEnum):
    """How a rollout is stopped: at its next turn boundary (a partial), or at once (a masked row)."""

    PAUSE = "pause"
    ABORT = "abort"


class AgentControl(Protocol):
    async def stop(self, agent: str, keys: list[str], abort: bool) -> None: ...

    async def policy(self, agent: str) -> str: ...

    async def current_version(self, agent: str) -> int: ...


class RolloutRun:
    """A rollout's progress (its last completed turn) and whether it must stop, across its attempts."""

    def __init__(self, rollout: Rollout, stop_keys: list[str], *, report: bool, journal: OnRecord | None) -> None:
        self.rollout = rollout
        self.progress = rollout.resume if rollout.resume is not None else Checkpoint()
        self.stop_keys = stop_keys
        self.stopping: Stop | None = None
        self._report = report
        self._journal = journal

    def on_turn(self, record: dict[str, Any]) -> None:
        """The Agent completed a turn of this rollout."""
        self.progress.extend(record)
        if self._journal is not None:
            self._journal(self.rollout.key, record)

    def restart(self) -> None:
        """Forget the progress: the next attempt starts over (a stale rollout's tokens are all too old to keep)."""
        self.progress = Checkpoint()

    def attempt_row(self) -> dict[str, Any]:
        """The row the next attempt sends: the rollout's row and the dispatcher's instructions (`RUN`)."""
        resume = self.progress.to_wire() if self.progress.turn else None
        return {**self.rollout.row, RUN: {"stop": self.stop_keys, "report": self._report, "resume": resume}}

    def partial(self, policy: str) -> dict[str, Any]:
        """The row of this rollout stopped at its last completed turn."""
        return partial_row(self.rollout.row, self.progress, agent=self.rollout.agent, policy=policy)

    def masked(self, attempts: int, why: str) -> dict[str, Any]:
        """The row of this rollout cut before it finished: a `straggler` failure row with what it had done."""
        episode = {"output": self.progress.items, "usage": self.progress.usage}
        return failure_row({**self.rollout.row, "response": episode}, FailureKind.STRAGGLER, why, attempts)


class ServeAgents:
    """`AgentControl` over Serve: a stop is broadcast to every replica of the agent's Agent deployment."""

    def __init__(self) -> None:
        self._policies: dict[str, str] = {}

    async def stop(self, agent: str, keys: list[str], abort: bool) -> None:
        from ray import serve

        response = serve.get_app_handle(agent).broadcast("stop_rollouts", keys, abort)
        await response.results_async(timeout_s=60, return_exceptions=True)  # a replica that died stops nothing

    async def policy(self, agent: str) -> str:
        if agent not in self._policies:
            from ray import serve

            self._policies[agent] = await serve.get_app_handle(agent).policy_app.remote()
        return self._policies[agent]

    async def current_version(self, agent: str) -> int:
        from gym_serve.models.weights import current_version

        return await current_version(await self.policy(agent))


async def stop_on_agents(control: AgentControl, runs: list[RolloutRun], mode: Stop) -> None:
    """Tell every agent that runs one of `runs` to stop it (one broadcast per agent)."""
    by_agent: dict[str, list[str]] = {}
    for run in runs:
        by_agent.setdefault(run.rollout.agent, []).append(run.stop_keys[-1])
    await asyncio.gather(*(control.stop(agent, keys, mode is Stop.ABORT) for agent, keys in by_agent.items()))
