"""Rollouts in groups (GRPO's: one task's rollouts together), and long-tail control for them.

With `group_size`, a batch's rollouts come out a task's group at a time (`Grouped`). A group's step waits for
its slowest rollout, and with heavy-tailed response lengths the slowest is far slower than the rest. A
`GroupPolicy` finishes a group early:

- once `finish_at` of its rollouts have finished, or once the finished rewards differ (`until_rewards_differ`:
  the group then carries a learning signal, which identical rewards do not);
- its stragglers come back as partials, stopped at their next turn boundary to be continued next step
  (`stragglers: partial`; none of their tokens is lost), or are cut at once as masked `straggler` rows
  (`stragglers: masked`);
- `over_provision` starts `m` more rollouts per group than `group_size` and keeps the first `group_size` that
  finish.

The policy's decisions are made here; stopping rollouts is the stream's (`RolloutStream.stop`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym_serve.collect.attempts import Outcome
from gym_serve.collect.dispatch import Rollout, RolloutStream
from gym_serve.collect.progress import Stop

__all__ = ["GroupPolicy", "Grouped"]

TaskKey = tuple[str, int]


class GroupPolicy(BaseModel):
    """When a group is finished before all its rollouts are, and what becomes of the others."""

    model_config = ConfigDict(extra="forbid", strict=True)  # `finish_at: true` is refused, not taken as 1

    finish_at: int | None = Field(
        default=None, ge=1, description="Finish a group once this many of its rollouts have finished."
    )
    until_rewards_differ: bool = Field(
        default=False, description="Finish a group once its finished rollouts' rewards differ (two distinct)."
    )
    stragglers: Literal["partial", "masked"] = Field(
        default="partial",
        description="`partial`: the unfinished rollouts stop at their next turn boundary and come back as "
        "partials; `masked`: they are cut at once and come back as masked `straggler` rows.",
    )
    over_provision: int = Field(
        default=0, ge=0, description="Start this many more rollouts per group and keep the first that finish."
    )


@dataclass
class _Group:
    members: list[Rollout]
    finished: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    resolved: int = 0
    closed: bool = False


class Grouped:
    """`async for rows in Grouped(...)`: the stream's rows in groups, each task's together, finished per the policy.

    Without a policy a group is every `size` rollouts of a task that end (failure rows included), as they end.
    With one, a task's rollouts (`size` + `over_provision`) are one group, closed when the policy says: its
    first `size` finished rows (then failure rows, then masked stragglers, up to `size`) come out together.
    Partials come out alone as they arrive, and so does a straggler that finished before its stop landed
    (marked `straggler: true`). Groups the stream left smaller (a paused batch) come out at its end.
    `done`: rollouts of these groups that finished before (an ingress batch's replayed rows), not run again.
    """

    def __init__(
        self,
        stream: RolloutStream,
        planned: Iterable[Rollout],
        size: int,
        policy: GroupPolicy | None,
        done: Iterable[tuple[Rollout, dict[str, Any]]] = (),
    ) -> None:
        self.stream, self.size, self.policy = stream, size, policy
        self._groups: dict[TaskKey, _Group] = {}
        for rollout in planned:
            self._groups.setdefault((rollout.agent, rollout.task), _Group([])).members.append(rollout)
        self._done_before = list(done)
        self._backlog: deque[tuple[Rollout, Outcome]] = deque()

    async def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        for rollout, row in self._done_before:
            async for rows in self._take(rollout, Outcome(row, None, 1)):
                yield rows
        async for rollout, outcome in self.stream:
            self._backlog.append((rollout, outcome))
            while self._backlog:
                async for rows in self._take(*self._backlog.popleft()):
                    yield rows
        for group in self._groups.values():
            if not group.closed and group.finished + group.failed:
                yield group.finished + group.failed

    async def _take(self, rollout: Rollout, outcome: Outcome) -> AsyncIterator[list[dict[str, Any]]]:
        """What one outcome lets out: itself (a partial, a late straggler), its group, or nothing yet."""
        if outcome.partial:
            yield [outcome.row]
            return
        group = self._groups[(rollout.agent, rollout.task)]
        if group.closed:  # finished before its stop landed: not lost, but no longer its group's
            yield [{**outcome.row, "straggler": True}]
            return
        (group.finished if outcome.ok else group.failed).append(outcome.row)
        group.resolved += 1
        if self.policy is None:
            if len(group.finished) + len(group.failed) == self.size:
                yield group.finished + group.failed
                group.finished, group.failed = [], []
        elif self._done(group):
            rows, partials = await self._close(group)
            yield rows
            for partial in partials:
                yield [partial]

    def _done(self, group: _Group) -> bool:
        policy, finished = self.policy, group.finished
        assert policy is not None
        return (
            len(finished) >= self.size
            or (policy.finish_at is not None and len(finished) >= policy.finish_at)
            or (policy.until_rewards_differ and len({row.get("reward") for row in finished}) > 1)
            or group.resolved == len(group.members)
        )

    async def _close(self, group: _Group) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The group's rows, and what comes right after it: the partials of its stragglers that had not started
        (the others come as they stop), and finished rows beyond its size (marked `straggler`)."""
        assert self.policy is not None
        self._backlog.extend(self.stream.ready())  # those that finished with the last are still the group's
        mine = {id(member) for member in group.members}
        waiting: deque[tuple[Rollout, Outcome]] = deque()
        for rollout, outcome in self._backlog:
            if id(rollout) in mine and not outcome.partial:
                (group.finished if outcome.ok else group.failed).append(outcome.row)
                group.resolved += 1
            else:
                waiting.append((rollout, outcome))
        self._backlog = waiting
        group.closed = True
        ended = [*group.finished, *group.failed]
        rows, later = ended[: self.size], [{**row, "straggler": True} for row in ended[self.size :]]
        left = [r for r in group.members if not self.stream.ended(r)]
        mode = Stop.ABORT if self.policy.stragglers == "masked" else Stop.PAUSE
        for _, outcome in await self.stream.stop(left, mode):
            if outcome.partial:
                later.append(outcome.row)
            elif len(rows) < self.size:  # a masked straggler takes a place the group did not fill
                rows.append(outcome.row)
        return rows, later
