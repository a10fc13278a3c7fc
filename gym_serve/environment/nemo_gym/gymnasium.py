"""A Gymnasium-style NeMo Gym server (`/reset`, `/step`), hosted with NeMo Gym's `gymnasium_agent` semantics.

Such a server (a subclass of NeMo Gym's `resources_servers.gymnasium.GymnasiumServer`:
`blackjack`, `wordle`, `example_multi_turn_gymnasium`, `indian_banking`, ...) has
no `/seed_session` and no `/verify`. `gymnasium_agent` drives it; `GymnasiumHost`
gives gym-serve's own tool loop the same episode through the runner interface:

- `seed` POSTs the row to `/reset`; its observation (if any) is the episode's
  opening: the loop adds it to the prompt as a user message
  (`gym_serve.environment.runner.OPENING_KEY`), as gymnasium_agent appends it to
  the request's `input`.
- every model turn, with or without function calls, is a step
  (`EnvInfo.steps_every_turn`): `user_turn` POSTs the row plus that turn's
  response to `/step`, and answers with the step's reward, `terminated`,
  `truncated`, the outputs of the turn's function calls (`info.tool_outputs`)
  and the observation as the next user message;
- `verify` scores the episode as gymnasium_agent does: the sum of its step
  rewards, with the last step's `info`. It makes no call: the episode's steps
  were its verification. A server that says it supports an explicit close
  (`info.supports_explicit_close` at reset) is sent `/close`.

A step the server refuses (non-2xx) or that raises fails the rollout
(`env_error`), as gymnasium_agent's `raise_for_status` does.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from gym_serve.environment.nemo_gym.host import NemoGymServer
from gym_serve.environment.nemo_gym.inprocess import excerpt
from gym_serve.environment.runner import OPENING_KEY, EnvInfo
from gym_serve.errors import EnvError
from gym_serve.wire.responses import with_response_defaults

__all__ = ["GymnasiumHost"]


class GymnasiumHost(NemoGymServer):
    """A Gymnasium-style NeMo Gym server behind the runner interface; see the module docstring."""

    def __init__(self, server: str, config: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__(server, config, **options)
        self.info = EnvInfo(
            name=self.info.name,
            tools=[],
            has_seed=True,
            has_user_turn=True,
            steps_every_turn=True,
            replica_sessions=True,
            verify_timeout_s=self.verify_timeout_s,
        )

    async def seed(self, row: dict[str, Any]) -> dict[str, Any]:
        """`POST /reset` with the row; the state names the session and carries the reset observation."""
        self._sweep()
        session = self._new_session()
        reset = await self._answer("/reset", row, session)
        info = reset.get("info") if isinstance(reset.get("info"), dict) else {}
        session.episode.update(rewards=[], info={}, reset_info=info)
        key = uuid.uuid4().hex
        self._sessions[key] = session
        state: dict[str, Any] = {"session": key}
        if reset.get("observation"):
            state[OPENING_KEY] = reset["observation"]
        return state

    async def call_tools(
        self, calls: list[dict[str, Any]], state: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        raise EnvError(f"NeMo Gym server `{self.name}` takes every model turn as a step: it runs no tools apart")

    async def user_turn(
        self, row: dict[str, Any], response: dict[str, Any], state: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One Gymnasium step: the turn's response to `/step`; its answer as the loop's `Turn`."""
        session = self._session(state)
        params = row.get("responses_create_params") or {}
        body = {**row, "response": with_response_defaults(response, params)}
        if session.episode["reset_info"].get("supports_step_idempotency") is True:
            body["_ng_step_request_id"] = uuid.uuid4().hex
        step = await self._answer("/step", body, session)
        reward = float(step.get("reward") or 0.0)
        session.episode["rewards"].append(reward)
        session.episode["info"] = step.get("info") if isinstance(step.get("info"), dict) else {}
        session.episode["terminated"] = bool(step.get("terminated"))
        session.episode["truncated"] = bool(step.get("truncated"))
        outputs = [
            {"type": "function_call_output", "call_id": out["call_id"], "output": out["output"]}
            for out in session.episode["info"].get("tool_outputs", [])
        ]
        turn = {
            "message": step.get("observation"),
            "reward": reward,
            "terminated": session.episode["terminated"],
            "truncated": session.episode["truncated"],
            "tool_outputs": outputs,
        }
        return turn, state

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """The episode's reward: the sum of its step rewards (gymnasium_agent's), with the last step's `info` and the
        failure fields every NeMo Gym verdict carries (its `GymnasiumRunResponse` is a `BaseVerifyResponse`)."""
        session = self._session(state)
        episode = session.episode
        try:
            if episode["reset_info"].get("supports_explicit_close") is True:
                await self._answer("/close", {}, session)
        finally:
            await self._end(state["session"])
        reward = float(sum(episode["rewards"]))
        return {"reward": reward, "failure_kind": None, "failure_reason": None, "info": episode["info"]}

    def ends_session(self, path: str, raw: bytes) -> bool:
        """A step that terminated or truncated the episode ends it (the server closed its own state)."""
        if path != "/step":
            return False
        try:
            step = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False
        return isinstance(step, dict) and bool(step.get("terminated") or step.get("truncated"))

    async def _answer(self, path: str, body: dict[str, Any], session: Any) -> dict[str, Any]:
        try:
            status, raw = await self._post(path, body, session)
        except Exception as e:
            raise EnvError(f"NeMo Gym server `{self.name}`: {path} raised {type(e).__name__}: {e}") from e
        if not 200 <= status < 300:
            raise EnvError(f"NeMo Gym server `{self.name}`: {path} answered {status}: {excerpt(raw)}")
        answer = orjson.loads(raw) if raw else {}
        return answer if isinstance(answer, dict) else {}
