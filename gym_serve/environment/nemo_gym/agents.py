"""One of NeMo Gym's agents (`responses_api_agents/<agent>`), unchanged, in this process.

NeMo Gym's agents are FastAPI apps: `POST /run` takes a task row and returns the
rollout row (the row, `response`, `reward` and the verifier's fields), reaching
the model and the resources server by name through NeMo Gym's `ServerClient`.
`NemoGymAgent` builds one as NeMo Gym builds it and answers `run` by calling its
`/run` through ASGI. Its `ServerClient` calls go where `routes` says
(`gym_serve.environment.nemo_gym.routes`): in an Agent deployment, the model
names to Model-tier applications and the resources server's name to the
Environment tier, through handles; the agent's calls to itself (simple_agent's
`/run` calls its own `/v1/responses`) stay in this process.

The agent's config is its shipped block (`configs/<agent>.yaml`) with `config`
merged over it; `resources_server.name` and `model_server.name` default to the
names this host routes (`RESOURCES`, NeMo Gym's `policy_model`).

What the agent raises fails the rollout with its own kind (a model call the
replay model has no recording of is `replay_miss`, a server name the
application lacks is an `env_error` naming it). A rollout row NeMo Gym's judge
failsafe marked (`_ng_failure_class`) is a failure of that kind, as NeMo Gym's
rollout collection files it.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from gym_serve.environment.nemo_gym import catalog
from gym_serve.environment.nemo_gym.inprocess import asgi_post, build, excerpt
from gym_serve.environment.nemo_gym.routes import Routes
from gym_serve.errors import FailureKind, InputError, JudgeError, RolloutError

__all__ = ["POLICY", "NemoGymAgent", "agent_config"]

POLICY = "policy_model"
"""NeMo Gym's name for the policy's model server: the application's own Model tier."""


def agent_config(agent: str, config: dict[str, Any], resources_server: str | None) -> dict[str, Any]:
    """The agent's config: its shipped block, `config` merged over it, the server references filled in."""
    merged = _merged(catalog.agent_config_defaults(agent), config)
    refs = (
        ("resources_server", "resources_servers", resources_server),
        ("model_server", "responses_api_models", POLICY),
    )
    for key, kind, name in refs:
        ref = merged.get(key)
        if name is not None and (not isinstance(ref, dict) or ref.get("name") in (None, "???")):
            merged[key] = {"type": kind, **(ref if isinstance(ref, dict) else {}), "name": name}
    return merged


class NemoGymAgent:
    """A NeMo Gym agent hosted in-process; see the module docstring."""

    def __init__(
        self,
        agent: str,
        *,
        instance: str,
        routes: Routes,
        config: dict[str, Any] | None = None,
        resources_server: str | None = None,
        endpoints: dict[str, str] | None = None,
    ) -> None:
        self.name = agent
        self.instance = instance
        self.config = agent_config(agent, config or {}, resources_server)
        routes.apps[instance] = self.call  # the agent calls itself by its own name
        self.routes = routes
        self.app, self.server = build(
            catalog.agent_dir(agent),
            instance,
            {key: self.config[key] for key in config or {}},  # what the caller set, merged (checked for typos)
            defaults=self.config,
            routes=routes,
            endpoints=endpoints or {},
            keep_sessions=True,  # agents keep their own session state (agent sessions, compaction counters)
        )

    async def call(self, method: str, path: str, body: bytes, cookies: dict[str, str]) -> tuple[int, bytes, dict]:
        """One call to the agent's own app (its self-dispatched `/v1/responses`)."""
        return await asgi_post(self.app, path, body, cookies)

    async def run(self, row: dict[str, Any]) -> dict[str, Any]:
        """The rollout row of `row`: what the agent's `/run` answers."""
        status, body, _ = await asgi_post(self.app, "/run", orjson.dumps(row), {})
        if status == 422:
            raise InputError(f"NeMo Gym agent `{self.name}` refused the row: {excerpt(body)}", source=self.instance)
        if not 200 <= status < 300:
            raise RolloutError(
                f"NeMo Gym agent `{self.name}`: /run answered {status}: {excerpt(body)}",
                kind=FailureKind.AGENT_RUN_ERROR,
            )
        rollout = orjson.loads(body)
        failure = rollout.get("_ng_failure_class") if isinstance(rollout, dict) else None
        if failure == FailureKind.JUDGE_FAILED:
            raise JudgeError(f"NeMo Gym agent `{self.name}`: judge_failed: {rollout.get('failure_reason')}")
        if failure:
            kinds = {kind.value: kind for kind in FailureKind}
            raise RolloutError(
                f"NeMo Gym agent `{self.name}`: {failure}: {rollout.get('failure_reason')}",
                kind=kinds.get(str(failure), FailureKind.AGENT_RUN_ERROR),
            )
        if not isinstance(rollout, dict) or not isinstance(rollout.get("reward"), int | float):
            raise RolloutError(
                f"NeMo Gym agent `{self.name}`: /run answered no reward: {excerpt(body)}",
                kind=FailureKind.AGENT_RUN_ERROR,
            )
        return rollout


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`, nested dicts key by key (as NeMo Gym merges its config files)."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
