"""The staleness bound of asynchronous RL: a rollout sampled by too old a policy is run again, or flagged.

While a trainer updates the policy, rollouts keep running; one that started
long ago holds tokens from an old version, and its log-probs are off-policy by
that many updates. With `max_policy_lag` K, a finished rollout whose oldest
token (`policy_version_min`, stamped by the vLLM tier) is more than K versions
behind the policy's current version fails its attempt as `stale_policy`, and
the one retry path (`gym_serve.collect.attempts`) runs it again, on the current
policy, within the same attempt budget; with `flag_stale` it is returned as it
is, marked `policy_stale: true`. Every checked rollout carries its
`policy_lag`. Rollouts from a model tier without versions pass unchecked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gym_serve.errors import StalePolicy

__all__ = ["Staleness", "policy_version_of_agent"]

CurrentVersion = Callable[[str], Awaitable[int]]
"""Agent name → the current version of the policy its model tier serves."""


class Staleness:
    """Checks finished rollouts against `max_policy_lag`; `current(agent)` reads the policy's version now."""

    def __init__(
        self, max_policy_lag: int, *, flag_stale: bool = False, current: CurrentVersion | None = None
    ) -> None:
        self.max_policy_lag = max_policy_lag
        self.flag_stale = flag_stale
        self._current = current or policy_version_of_agent()

    async def checked(self, agent: str, row: dict[str, Any]) -> dict[str, Any]:
        """The rollout, with its `policy_lag`; raises `StalePolicy` (retryable) past the bound unless flagging."""
        oldest = row.get("policy_version_min")
        if oldest is None:
            return row
        current = await self._current(agent)
        lag = current - int(oldest)
        if lag <= self.max_policy_lag:
            return {**row, "policy_lag": lag}
        if self.flag_stale:
            return {**row, "policy_lag": lag, "policy_stale": True}
        raise StalePolicy(
            f"the rollout's oldest token is from policy version {oldest}, {lag} behind the current {current} "
            f"(max_policy_lag {self.max_policy_lag})"
        )


def policy_version_of_agent() -> CurrentVersion:
    """`current(agent)` for agents deployed on Serve: asks each agent once which application holds its policy."""
    from ray import serve

    from gym_serve.models.weights import current_version

    apps: dict[str, str] = {}

    async def current(agent: str) -> int:
        if agent not in apps:
            apps[agent] = await serve.get_app_handle(agent).policy_app.remote()
        return await current_version(apps[agent])

    return current
