"""`EnvRunner`: an environment behind the wire interface the agent calls.

The agent talks to environments in plain dicts (what crosses a Serve handle):
`describe`, `seed`, `call_tools`, `user_turn`, `verify`, and `snapshot`/`restore` for an
environment that saves a workspace at turn boundaries. The Serve deployment is a
thin wrapper around this class, and tests use it in-process.

Mistakes the *model* makes (an unknown tool, arguments that are not valid
JSON or do not fit the tool's schema, a tool that raises) become
`function_call_output` items with an error text the model can read and react
to. They never fail the rollout.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gym_serve.environment.core import Environment, Task, Verdict
from gym_serve.environment.tools import STATE_PARAM, ToolSpec, tool_turn
from gym_serve.errors import (
    EnvError,
    GymServeError,
    InputError,
    SessionLostError,
    ToolError,
    VerifierTimeoutError,
    VerifyError,
)
from gym_serve.wire.pieces import field_path
from gym_serve.wire.responses import Response

__all__ = ["OPENING_KEY", "EnvInfo", "EnvRunner"]

State = dict[str, Any] | None

OPENING_KEY = "_gs_observation"
"""A seeded rollout's state may carry the environment's first observation under this key (Gymnasium's reset
observation): the agent adds it to the prompt as a user message before the first model call."""


class EnvInfo(BaseModel):
    """What the agent needs to know of an environment once, before its first rollout."""

    model_config = ConfigDict(frozen=True)

    name: str
    tools: list[dict[str, Any]]
    """The tools' schemas, in the Responses API's `tools` form."""
    has_seed: bool
    """Call `seed` to start a rollout's state."""
    has_user_turn: bool
    """The environment answers the model's plain messages (games, simulated users)."""
    execute_tool_calls: bool = True
    """False: the model's function calls are its answer, judged and never run."""
    verify_timeout_s: float | None = None
    """Verify's deadline, which each rollout row records (`_gs_timings.verify_deadline_s`) for the health checks."""
    steps_every_turn: bool = False
    """Every model turn, with function calls or without, goes to `user_turn` as one step (Gymnasium's `step`, as
    NeMo Gym's `gymnasium_agent` drives it): the turn it answers carries the outputs of the calls, the step's reward,
    `terminated` and `truncated`. Tools are never called apart."""
    replica_sessions: bool = False
    """The environment keeps each rollout's state in the memory of the replica that seeded it (a hosted NeMo Gym
    server): every later call of the rollout must reach that replica."""
    sandboxes: bool = False
    """Each rollout works in a sandbox (`gym_serve.environment.workspace`), which the Sandbox tier holds."""
    replay_safe_tools: bool = False
    """A rollout can go on from its last completed turn: its tools change nothing outside what the rollout
    carries (`Environment.replay_safe_tools`)."""
    snapshots: bool = False
    """The environment snapshots what its tools change outside the state after every turn (`snapshot`)."""


class EnvRunner:
    """Runs one environment instance for many concurrent rollouts."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.specs: dict[str, ToolSpec] = type(env).tool_specs()
        self.info = EnvInfo(
            name=type(env).name(),
            tools=[spec.schema() for spec in self.specs.values()],
            has_seed=type(env).reset is not Environment.reset or type(env).State is not None,
            has_user_turn=type(env).user_turn is not Environment.user_turn,
            execute_tool_calls=type(env).execute_tool_calls,
            verify_timeout_s=env.verify_timeout_s,
            sandboxes=getattr(env, "uses_sandboxes", False),
            replay_safe_tools=type(env).replay_safe_tools,
            snapshots=type(env).snapshot is not Environment.snapshot,
        )
        self._verify = _without_unused_state(env.verify)
        self._user_turn = _without_unused_state(env.user_turn)

    def describe(self) -> EnvInfo:
        return self.info

    async def seed(self, row: dict[str, Any]) -> State:
        task = self._task(row)
        try:
            state = await self.env.reset(task)
        except GymServeError:  # the environment named the failure itself (its sandbox is gone: `session_lost`)
            raise
        except Exception as e:
            raise EnvError(f"`{type(self.env).name()}.reset` raised {type(e).__name__}: {e}") from e
        return _dump(state)

    async def call_tools(self, calls: list[dict[str, Any]], state: State) -> tuple[list[dict[str, Any]], State]:
        """Run the function calls of one model turn, in order, and return their outputs and the new state; those that
        would start past the environment's `tool_turn_budget_s` are answered, not run (a slow tool bounds itself by
        `turn_time_left`: no timer per call on this path)."""
        try:
            live_state = self._load_state(state)
        except ValidationError as e:  # the rollout's state is broken: no tool can run, and the model cannot help
            raise ToolError(f"`{type(self.env).name()}`: the rollout's state is not a valid `State`: {e}") from e
        budget = self.env.tool_turn_budget_s
        outputs = []
        with tool_turn(budget) as deadline:
            for call in calls:
                if time.monotonic() < deadline:
                    text = await self._call_one(call, live_state)
                else:
                    text = (
                        f"Error: not run: this turn's tool calls used their {budget:g} s. Make fewer or faster calls."
                    )
                outputs.append({"type": "function_call_output", "call_id": call.get("call_id", ""), "output": text})
        return outputs, _dump(live_state)

    async def user_turn(
        self, row: dict[str, Any], response: dict[str, Any], state: State
    ) -> tuple[dict[str, Any] | None, State]:
        """The environment's reply to a plain model answer (a `Turn` as a dict, or None), and the new state."""
        live_state = self._load_state(state)
        try:
            turn = await self._user_turn(self._task(row), Response.model_validate(response), live_state)
        except Exception as e:
            raise EnvError(f"`{type(self.env).name()}.user_turn` raised {type(e).__name__}: {e}") from e
        return (turn.model_dump() if turn is not None else None), _dump(live_state)

    async def snapshot(self, state: State) -> str | None:
        """The id of a snapshot of what the rollout's tools changed outside its state (see `Environment.snapshot`)."""
        try:
            return await self.env.snapshot(self._load_state(state))
        except Exception as e:
            raise EnvError(f"`{type(self.env).name()}.snapshot` raised {type(e).__name__}: {e}") from e

    async def restore(self, snapshot: str, state: State) -> State:
        """The state of a rollout resumed from a checkpoint, its workspace brought back from `snapshot`."""
        try:
            return _dump(await self.env.restore(snapshot, self._load_state(state)))
        except Exception as e:
            raise EnvError(f"`{type(self.env).name()}.restore` raised {type(e).__name__}: {e}") from e

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: State) -> dict[str, Any]:
        """Score an episode; returns `reward` plus optional `reward_components` and extra fields."""
        task = self._task(row)
        deadline = self.env.verify_timeout_s
        try:
            parsed = Response.model_validate(response)
            # a little grace: an environment that bounds its own checks by the deadline reports its timeout first
            verdict = await asyncio.wait_for(self._verify(task, parsed, self._load_state(state)), deadline + 1.0)
        except GymServeError:  # the environment named the failure itself (e.g. a `JudgeError`)
            raise
        except TimeoutError as e:
            raise VerifierTimeoutError(
                f"`{type(self.env).name()}.verify` did not finish within its deadline of {deadline:g} s "
                "(the environment's `verify_timeout_s`)"
            ) from e
        except Exception as e:
            raise VerifyError(f"`{type(self.env).name()}.verify` raised {type(e).__name__}: {e}") from e
        if isinstance(verdict, bool | int | float):
            return {"reward": float(verdict)}
        if not isinstance(verdict, Verdict):
            raise VerifyError(
                f"`{type(self.env).name()}.verify` must return a float or a Verdict, got {type(verdict).__name__}"
            )
        result: dict[str, Any] = {**verdict.fields, "reward": verdict.reward}
        if verdict.mask_sample:
            result["mask_sample"] = True
        if verdict.components is not None:
            result["reward_components"] = verdict.components
        return result

    async def _call_one(self, call: dict[str, Any], state: BaseModel | None) -> str:
        name = call.get("name", "")
        spec = self.specs.get(name)
        if spec is None:
            available = ", ".join(f"`{n}`" for n in self.specs) or "none"
            return f"Error: there is no tool named `{name}`. Available tools: {available}."
        try:
            arguments = spec.parse_arguments(call.get("arguments", ""))
        except ValueError as e:
            return f"Error: {e}"
        method = getattr(self.env, name)
        try:
            result = await (method(state, **arguments) if spec.takes_state else method(**arguments))
        except SessionLostError:  # the rollout's session (its sandbox) is gone: no tool can go on, nor the model
            raise
        except Exception as e:  # a tool's own failure is the model's to see, like an HTTP error body
            return f"Error: tool `{name}` failed: {type(e).__name__}: {e}"
        return _as_text(result)

    def _task(self, row: dict[str, Any]) -> Task:
        try:
            return self.env.Task.model_validate(row)
        except ValidationError as e:
            problems = "; ".join(f"`{field_path(err['loc']) or '(row)'}`: {err['msg']}" for err in e.errors())
            field = field_path(e.errors()[0]["loc"]) or None
            raise InputError(
                f"row does not fit `{type(self.env).name()}`'s task fields: {problems}",
                source=f"environment `{type(self.env).name()}`",
                field=field,
            ) from e

    def _load_state(self, state: State) -> BaseModel | None:
        model = self.env.State
        return None if model is None or state is None else model.model_validate(state)


def _without_unused_state(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method(task, response, state)`, also for an environment whose `verify`/`user_turn` takes no `state`."""
    if STATE_PARAM in inspect.signature(method).parameters:
        return method
    return lambda task, response, state: method(task, response)


def _dump(state: BaseModel | None) -> State:
    return state.model_dump(mode="json") if state is not None else None


def _as_text(result: Any) -> str:
    """A tool result as the model sees it: strings verbatim, everything else as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    return json.dumps(result)
