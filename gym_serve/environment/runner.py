"""`EnvRunner`: an environment behind the wire interface the agent calls.

The agent talks to environments in plain dicts (what crosses a Serve handle):
`describe`, `seed`, `call_tools`, `user_turn`, `verify`. The Serve deployment is a thin
wrapper around this class, and tests use it in-process.

Mistakes the *model* makes (an unknown tool, arguments that are not valid
JSON or do not fit the tool's schema, a tool that raises) become
`function_call_output` items with an error text the model can read and react
to. They never fail the rollout.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from gym_serve.environment.core import Environment, Verdict
from gym_serve.environment.tools import ToolSpec
from gym_serve.errors import EnvError, RolloutError, VerifyError
from gym_serve.wire.responses import Response

__all__ = ["EnvRunner"]

State = dict[str, Any] | None


class EnvRunner:
    """Runs one environment instance for many concurrent rollouts."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.specs: dict[str, ToolSpec] = type(env).tool_specs()
        self._tool_schemas = [spec.schema() for spec in self.specs.values()]
        self._has_seed = type(env).seed is not Environment.seed or type(env).State is not None
        self._has_user_turn = type(env).user_turn is not Environment.user_turn

    def describe(self) -> dict[str, Any]:
        """What the agent needs to know once: the name, tool schemas, whether to call `seed` and `user_turn`,
        and whether function calls are run or are the answer."""
        return {
            "name": type(self.env).name(),
            "tools": self._tool_schemas,
            "has_seed": self._has_seed,
            "has_user_turn": self._has_user_turn,
            "execute_tool_calls": type(self.env).execute_tool_calls,
        }

    async def seed(self, row: dict[str, Any]) -> State:
        task = self._task(row)
        try:
            state = await self.env.seed(task)
        except Exception as e:
            raise EnvError(f"`{type(self.env).name()}.seed` raised {type(e).__name__}: {e}") from e
        return _dump(state)

    async def call_tools(self, calls: list[dict[str, Any]], state: State) -> tuple[list[dict[str, Any]], State]:
        """Run the function calls of one model turn, in order, and return their outputs and the new state."""
        live_state = self._load_state(state)
        outputs = []
        for call in calls:
            text = await self._call_one(call, live_state)
            outputs.append({"type": "function_call_output", "call_id": call.get("call_id", ""), "output": text})
        return outputs, _dump(live_state)

    async def user_turn(
        self, row: dict[str, Any], response: dict[str, Any], state: State
    ) -> tuple[dict[str, Any] | None, State]:
        """The environment's reply to a plain model answer (a `Turn` as a dict, or None), and the new state."""
        live_state = self._load_state(state)
        try:
            turn = await self.env.user_turn(self._task(row), Response.model_validate(response), live_state)
        except Exception as e:
            raise EnvError(f"`{type(self.env).name()}.user_turn` raised {type(e).__name__}: {e}") from e
        return (turn.model_dump() if turn is not None else None), _dump(live_state)

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: State) -> dict[str, Any]:
        """Score an episode; returns `reward` plus optional `reward_components` and extra fields."""
        task = self._task(row)
        try:
            parsed = Response.model_validate(response)
            verdict = await self.env.verify(task, parsed, self._load_state(state))
        except RolloutError:  # the environment named the failure class itself (e.g. `judge_error`)
            raise
        except Exception as e:
            raise VerifyError(f"`{type(self.env).name()}.verify` raised {type(e).__name__}: {e}") from e
        if isinstance(verdict, bool | int | float):
            return {"reward": float(verdict)}
        if not isinstance(verdict, Verdict):
            raise VerifyError(
                f"`{type(self.env).name()}.verify` must return a float or a Verdict, got {type(verdict).__name__}"
            )
        result: dict[str, Any] = {**verdict.fields, "reward": verdict.reward}
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
        except Exception as e:  # a tool's own failure is the model's to see, like an HTTP error body
            return f"Error: tool `{name}` failed: {type(e).__name__}: {e}"
        return _as_text(result)

    def _task(self, row: dict[str, Any]) -> BaseModel:
        try:
            return self.env.Task.model_validate(row)
        except ValidationError as e:
            problems = "; ".join(f"`{'.'.join(map(str, err['loc'])) or '(row)'}`: {err['msg']}" for err in e.errors())
            raise EnvError(f"row does not fit `{type(self.env).name()}`'s task fields: {problems}") from e

    def _load_state(self, state: State) -> BaseModel | None:
        model = self.env.State
        return None if model is None or state is None else model.model_validate(state)


def _dump(state: BaseModel | None) -> State:
    return state.model_dump(mode="json") if state is not None else None


def _as_text(result: Any) -> str:
    """A tool result as the model sees it: strings verbatim, everything else as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    return json.dumps(result)
