"""The in-cluster door: rollouts streamed to a trainer in the same Ray cluster, without files or HTTP.

A trainer that runs in the cluster (an actor, or a script on a cluster node) does not need the HTTP ingress:
`ServeRollouts.rollouts` hands its rows to the dispatcher (`gym_serve.collect.dispatch`), as a collection and
the ingress do (the same row checks, numbering, overrides, per-agent repeats, in-flight window, retries and
failure rows), and yields rollouts as they finish. It has the client's `rollouts` signature, so the trainer
adapters take either.

A batch with a row that cannot run raises its `InputError` (line and field) before anything runs, as the
ingress answers 422; with `on_bad_row="fail"` such a row comes back as a `bad_input` failure row instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Literal

from gym_serve.collect.attempts import RetryPolicy
from gym_serve.collect.dispatch import Dispatcher, Rejected, Repeats, Rollout, Send, check_repeats

__all__ = ["ServeRollouts"]

SOURCE = "rows"
"""How the rows are named in the messages about them (`rows, line 2, field ...`)."""


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
    ) -> None:
        self.dispatcher = Dispatcher(
            agents if agents is not None else _deployed_agents,
            default_agent=default_agent,
            policy=policy or RetryPolicy(max_attempts=3, attempt_timeout_s=600.0),
            max_in_flight=max_in_flight,
            send=send,
            seed=seed,
        )

    async def __aenter__(self) -> ServeRollouts:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def rollouts(
        self,
        rows: Iterable[dict[str, Any]],
        *,
        num_repeats: Repeats = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        on_bad_row: Literal["refuse", "fail"] = "refuse",
    ) -> AsyncIterator[dict[str, Any]]:
        """Rollouts of `rows` × `num_repeats` (sampling overrides merged into each row), as they finish."""
        sampling = {"temperature": temperature, "top_p": top_p, "max_output_tokens": max_output_tokens}
        overrides = {k: v for k, v in sampling.items() if v is not None}
        if not isinstance(num_repeats, int):
            check_repeats(num_repeats, self.dispatcher.agents)
        expanded = self.dispatcher.expand(
            enumerate(rows, 1), num_repeats=num_repeats, overrides=overrides, source=SOURCE
        )
        planned = list(expanded)
        rejected = [item for item in planned if isinstance(item, Rejected)]
        if rejected and on_bad_row == "refuse":
            raise rejected[0].error
        for item in rejected:
            yield item.failure_row(SOURCE)
        async for _, outcome in self.dispatcher.stream(item for item in planned if isinstance(item, Rollout)):
            yield outcome.row


def _deployed_agents() -> list[str]:
    """The applications on this cluster's Serve with an Agent deployment."""
    from ray import serve

    return [name for name, app in serve.status().applications.items() if "Agent" in app.deployments]
