"""The in-cluster door: rollouts streamed to a trainer in the same Ray cluster, without files or HTTP.

A trainer that runs in the cluster (an actor, or a script on a cluster node) does not need the HTTP ingress:
`ServeRollouts.rollouts` hands its rows to the dispatcher (`gym_serve.collect.dispatch`), as a collection and
the ingress do (the same row checks, numbering, overrides, per-agent repeats, in-flight window, retries and
failure rows), and yields rollouts as they finish. It has the client's `rollouts` signature, so the trainer
adapters take either.

A batch with a row that cannot run raises its `InputError` (line and field) before anything runs, as the
ingress answers 422; with `on_bad_row="fail"` such a row comes back as a `bad_input` failure row instead.

The batch `rollouts` returns is also the trainer's handle on it: `await batch.pause()` stops it at its
rollouts' next turn boundaries, and the iteration then yields every unfinished rollout as a partial
(`partial: true`, its tokens and policy versions so far) and ends. `rollouts(partials=...)` continues them
under the policy serving now. With `group_size`, a task's rollouts come out together, and a `group_policy`
finishes groups early (`gym_serve.collect.groups`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Literal

from gym_serve.collect.attempts import RetryPolicy
from gym_serve.collect.dispatch import Dispatcher, Rejected, Repeats, Rollout, RolloutStream, Send, check_repeats
from gym_serve.collect.groups import Grouped, GroupPolicy
from gym_serve.collect.progress import AgentControl
from gym_serve.collect.staleness import Staleness

__all__ = ["RolloutBatch", "ServeRollouts"]

SOURCE = "rows"
"""How the rows are named in the messages about them (`rows, line 2, field ...`)."""
PARTIALS = "partials"


class ServeRollouts:
    """Runs rollout rows on deployed agent applications (by `agent_ref.name`, else `default_agent`).

    `agents`: the applications rows may name; by default the cluster's applications that have an Agent
    deployment, read when the first rows arrive.
    """

    def __init__(
        self,
        *,
        default_agent: str | None = None,
        agents: Sequence[str] | None = None,
        policy: RetryPolicy | None = None,
        max_in_flight: int = 256,
        seed: int | None = None,
        send: Send | None = None,
        control: AgentControl | None = None,
    ) -> None:
        self.dispatcher = Dispatcher(
            agents if agents is not None else _deployed_agents,
            default_agent=default_agent,
            policy=policy or RetryPolicy(max_attempts=3, attempt_timeout_s=600.0),
            max_in_flight=max_in_flight,
            send=send,
            seed=seed,
            control=control,
        )

    async def __aenter__(self) -> ServeRollouts:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def rollouts(
        self,
        rows: Iterable[dict[str, Any]] = (),
        *,
        partials: Iterable[dict[str, Any]] = (),
        num_repeats: Repeats = 1,
        group_size: int | None = None,
        group_policy: GroupPolicy | dict[str, Any] | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        max_policy_lag: int | None = None,
        flag_stale: bool = False,
        on_bad_row: Literal["refuse", "fail"] = "refuse",
    ) -> RolloutBatch:
        """Rollouts of `rows` × `num_repeats` (sampling overrides merged into each row) and of the `partials`
        continued, as they finish: iterate the batch, and `pause()` it when the trainer wants it to stop."""
        sampling = {"temperature": temperature, "top_p": top_p, "max_output_tokens": max_output_tokens}
        staleness = Staleness(max_policy_lag, flag_stale=flag_stale) if max_policy_lag is not None else None
        return RolloutBatch(
            self.dispatcher,
            list(rows),
            list(partials),
            num_repeats=num_repeats,
            group_size=group_size,
            group_policy=GroupPolicy.model_validate(group_policy) if isinstance(group_policy, dict) else group_policy,
            overrides={k: v for k, v in sampling.items() if v is not None},
            staleness=staleness,
            on_bad_row=on_bad_row,
        )


class RolloutBatch:
    """One batch of rollouts: `async for row in batch` yields them as they finish; `pause()` stops it.

    `groups()` yields the same rows a list at a time: each task's group together (with `group_size`), a partial
    or a late straggler alone, every row alone without groups.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        rows: list[dict[str, Any]],
        partials: list[dict[str, Any]],
        *,
        num_repeats: Repeats,
        group_size: int | None,
        group_policy: GroupPolicy | None,
        overrides: dict[str, Any],
        staleness: Staleness | None,
        on_bad_row: Literal["refuse", "fail"],
    ) -> None:
        self.dispatcher, self.rows, self.partials = dispatcher, rows, partials
        self.num_repeats, self.group_size, self.group_policy = num_repeats, group_size, group_policy
        self.overrides, self.staleness, self.on_bad_row = overrides, staleness, on_bad_row
        self._stream: RolloutStream | None = None
        self._paused = False

    async def pause(self) -> int:
        """Stop at the rollouts' next turn boundaries: the iteration yields the unfinished ones as partials and
        ends. Returns how many were running."""
        self._paused = True
        return await self._stream.pause() if self._stream is not None else 0

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._rows()

    async def _rows(self) -> AsyncIterator[dict[str, Any]]:
        async for rows in self.groups():
            for row in rows:
                yield row

    async def groups(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The batch's rows, a group (or a lone row) at a time."""
        planned, rejected = await plan(
            self.dispatcher,
            self.rows,
            self.partials,
            num_repeats=self.num_repeats,
            group_size=self.group_size,
            group_policy=self.group_policy,
            overrides=self.overrides,
        )
        if rejected and self.on_bad_row == "refuse":
            raise rejected[0].error
        for item in rejected:
            yield [item.failure_row(SOURCE)]
        self._stream = self.dispatcher.stream(planned, self.staleness)
        if self._paused:
            await self._stream.pause()
        size = group_size_of(self.group_size, self.num_repeats, self.group_policy)
        if size is None:
            async for _, outcome in self._stream:
                yield [outcome.row]
            return
        async for rows in Grouped(self._stream, planned, size, self.group_policy):
            yield rows


async def plan(
    dispatcher: Dispatcher,
    rows: list[dict[str, Any]],
    partials: list[dict[str, Any]],
    *,
    num_repeats: Repeats,
    group_size: int | None,
    group_policy: GroupPolicy | None,
    overrides: dict[str, Any],
    source: str = SOURCE,
) -> tuple[list[Rollout], list[Rejected]]:
    """The rollouts a batch runs (its rows expanded, its partials continued) and what it cannot run.

    A group policy needs whole groups: `num_repeats` one count, the group's size (it defaults to it), and with
    `over_provision` that many more rollouts of each task. Raises `ValueError` naming the option otherwise.
    """
    if not isinstance(num_repeats, int):
        check_repeats(num_repeats, dispatcher.agents)
    if group_policy is not None:
        if not isinstance(num_repeats, int) or (group_size is not None and group_size != num_repeats):
            raise ValueError(
                f"group_policy: a group is one task's rollouts, so `num_repeats` ({num_repeats}) must be one count "
                f"equal to `group_size` ({group_size})"
            )
        num_repeats += group_policy.over_provision
    planned: list[Rollout] = []
    rejected: list[Rejected] = []
    expanded = dispatcher.expand(enumerate(rows, 1), num_repeats=num_repeats, overrides=overrides, source=source)
    for item in [*expanded, *await dispatcher.continued(enumerate(partials, 1), source=PARTIALS)]:
        (planned if isinstance(item, Rollout) else rejected).append(item)  # type: ignore[arg-type]
    return planned, rejected


def group_size_of(group_size: int | None, num_repeats: Repeats, policy: GroupPolicy | None) -> int | None:
    """The size of a batch's groups: `group_size`, or with a group policy a task's `num_repeats`."""
    if group_size is None and policy is not None and isinstance(num_repeats, int):
        return num_repeats
    return group_size


def _deployed_agents() -> list[str]:
    """The applications on this cluster's Serve with an Agent deployment."""
    from ray import serve

    return [name for name, app in serve.status().applications.items() if "Agent" in app.deployments]
