"""The tool-loop agent: one episode from an input row to a rollout row.

seed → (model call → run every function call → append outputs)* → verify.

Environments with a `user_turn` (games, simulated users) answer the model's
plain messages: their reply is appended as a user message and the loop goes
on until they end the episode; their per-step rewards land in `step_rewards`.
A Gymnasium-style environment (`EnvInfo.steps_every_turn`: NeMo Gym's
`gymnasium_agent` semantics) takes every model turn as a step, function calls
included: the step's tool outputs and observation follow the turn, and the
episode ends when the step says `terminated` or `truncated`. Its reset
observation, when the seeded state carries one (`OPENING_KEY`), opens the
conversation as a user message.

The episode *terminates* when the model answers without a function call (or
the environment ends it); it is *truncated* when its response is incomplete
(it ran out of output tokens or context), when the model answers with reasoning
only or nothing (as NeMo Gym's `simple_agent`: the response is marked
incomplete, `metadata.ng_termination_reason`), or after `max_steps` model calls.
The rollout row records both (`terminated`, `truncated`), as Gymnasium does.
For an environment whose function calls are the answer
(`execute_tool_calls = False`), it also terminates at the first turn with
calls, and runs none of them. The loop is written against two small interfaces,
`ModelClient` and `EnvClient`, so the same code runs over Serve handles in a
deployment and over in-process objects in tests.

When the model tier stamps its tokens with policy versions, the rollout row
says the oldest and newest version that sampled any of them
(`policy_version_min`, `policy_version_max`): what a staleness bound reads.

The conversation stays a list of plain dicts: items are appended, never
re-validated or re-serialized, so a long episode costs O(items), not O(n²).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from pydantic import AliasChoices, BaseModel, Field

from gym_serve.environment.runner import OPENING_KEY, EnvInfo
from gym_serve.errors import (
    EnvError,
    FailureKind,
    GymServeError,
    ModelError,
    RolloutError,
    ToolError,
    VerifyError,
    failure_kind,
)
from gym_serve.wire.pieces import input_items, user_message
from gym_serve.wire.tokens import policy_version_range

__all__ = ["AgentConfig", "EnvClient", "ModelClient", "call_tier", "run_episode", "session_id"]

_USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


class AgentConfig(BaseModel):
    """Options of the tool-loop agent."""

    max_steps: int = Field(default=10, ge=1, description="Most model calls in one episode.")
    tier_call_timeout_s: float | None = Field(
        default=300.0,
        gt=0,
        validation_alias=AliasChoices("tier_call_timeout_s", "call_timeout_s"),
        description="Deadline of each call to the model or environment tier; a hung tier fails the call.",
    )
    model_affinity: bool = Field(
        default=True,
        description="Send all model calls of a rollout to one replica when the model tier offers it "
        "(the vLLM tier: its prefix cache then holds the rollout's history).",
    )


class ModelClient(Protocol):
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]: ...


class EnvClient(Protocol):
    async def seed(self, row: dict[str, Any]) -> Any: ...

    async def call_tools(self, calls: list[dict[str, Any]], state: Any) -> tuple[list[dict[str, Any]], Any]: ...

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[Any, Any]: ...

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> dict[str, Any]: ...


async def run_episode(
    row: dict[str, Any],
    *,
    model: ModelClient,
    env: EnvClient,
    env_info: EnvInfo,
    config: AgentConfig,
) -> dict[str, Any]:
    """Run one rollout of `row` and return the rollout row (input fields + response + reward)."""
    started = time.perf_counter()
    timings = {"model_s": 0.0, "tool_s": 0.0, "verify_s": 0.0, "model_calls": 0, "tool_calls": 0}
    params = row["responses_create_params"]
    session = _session_id(row)

    state = None
    if env_info.has_seed:
        state = await _call("environment `seed`", env.seed(row), EnvError, config)
        params = _with_opening(params, state)

    tools = params.get("tools") or env_info.tools
    conversation = input_items(params["input"])
    output: list[dict[str, Any]] = []
    usage = {key: 0 for key in (*_USAGE_KEYS, "cached_tokens")}
    response: dict[str, Any] = {}
    step_rewards: list[float] = []
    terminated = False
    for _ in range(config.max_steps):
        request = {**params, "input": conversation + output, "tools": tools}
        t0 = time.perf_counter()
        response = await _call("model `responses`", model.responses(request, session), ModelError, config)
        timings["model_s"] += time.perf_counter() - t0
        timings["model_calls"] += 1
        items = response.get("output") or []
        output.extend(items)
        _add_usage(usage, response.get("usage"))
        if env_info.steps_every_turn:  # the turn is one step, calls and all
            turn, state = await _call("environment `user_turn`", env.user_turn(row, response, state), EnvError, config)
            step_rewards.append(float(turn["reward"]))
            if turn["terminated"] or turn.get("truncated"):
                terminated = bool(turn["terminated"])
                break
            output.extend(turn.get("tool_outputs") or [])
            if turn.get("message"):
                output.append(user_message(turn["message"]))
            continue
        if response.get("status") == "incomplete":
            break
        calls = [item for item in items if item.get("type") == "function_call"]
        if calls and not env_info.execute_tool_calls:
            terminated = True  # the calls are the answer: verify them, run nothing
            break
        if not calls:
            if not any(item.get("type") == "message" for item in items):
                # Reasoning only, or nothing, and not cut off: the trajectory ends unfinished, as NeMo Gym's
                # simple_agent ends it (same status and termination reason), and is verified as it stands.
                reason = "incomplete_reasoning" if items else "empty_output"
                metadata = {**(response.get("metadata") or {}), "ng_termination_reason": reason}
                response = {**response, "status": "incomplete", "metadata": metadata}
                break
            if not env_info.has_user_turn:
                terminated = True
                break
            so_far = {**response, "output": output}
            turn, state = await _call("environment `user_turn`", env.user_turn(row, so_far, state), EnvError, config)
            if turn is None:
                terminated = True
                break
            step_rewards.append(float(turn["reward"]))
            if turn.get("message"):
                output.append(user_message(turn["message"]))
            if turn["terminated"]:
                terminated = True
                break
            continue
        t0 = time.perf_counter()
        tool_outputs, state = await _call("environment `call_tools`", env.call_tools(calls, state), ToolError, config)
        timings["tool_s"] += time.perf_counter() - t0
        timings["tool_calls"] += len(calls)
        output.extend(tool_outputs)

    episode = {**response, "output": output, "usage": _full_usage(usage)}
    t0 = time.perf_counter()
    verdict = await _call("environment `verify`", env.verify(row, episode, state), VerifyError, config)
    timings["verify_s"] = time.perf_counter() - t0
    if env_info.verify_timeout_s is not None:
        timings["verify_deadline_s"] = env_info.verify_timeout_s
    timings["total_s"] = time.perf_counter() - started
    extra: dict[str, Any] = {"step_rewards": step_rewards} if step_rewards else {}
    versions = policy_version_range(output)
    if versions is not None:
        extra["policy_version_min"], extra["policy_version_max"] = versions
    return {
        **row,
        "responses_create_params": params,
        "response": episode,
        "mask_sample": False,
        **verdict,
        **extra,
        "terminated": terminated,
        "truncated": not terminated,
        "_gs_timings": timings,
    }


async def _call(what: str, call: Any, tier_error: type[GymServeError], config: AgentConfig) -> Any:
    """Await a call to another tier within the call deadline; its failure fails the rollout.

    The failure's kind is the exception's own (a replica died, the environment
    named it); an exception that says nothing more specific gets the tier's
    (`tier_error.kind`: a model call's failure is a `model_error`).
    """
    try:
        return await asyncio.wait_for(call, config.tier_call_timeout_s)
    except RolloutError:
        raise
    except TimeoutError as e:
        raise RolloutError(
            f"{what} did not answer within {config.tier_call_timeout_s} s", kind=FailureKind.TRANSPORT_TIMEOUT
        ) from e
    except Exception as e:
        kind = failure_kind(e)
        if kind is FailureKind.AGENT_RUN_ERROR:
            kind = tier_error.kind
        raise RolloutError(f"{what} failed: {type(e).__name__}: {e}", kind=kind) from e


def _with_opening(params: dict[str, Any], state: Any) -> dict[str, Any]:
    """The request with the environment's reset observation (`OPENING_KEY` in the seeded state) as a last user
    message, as NeMo Gym's gymnasium_agent sends it; the request itself where there is none."""
    opening = state.pop(OPENING_KEY, None) if isinstance(state, dict) else None
    if not isinstance(opening, str) or not opening:
        return params
    return {**params, "input": [*input_items(params["input"]), user_message(opening)]}


def _session_id(row: dict[str, Any]) -> str | None:
    task, rollout = row.get("_ng_task_index"), row.get("_ng_rollout_index")
    if task is None:
        return None
    return f"{task}:{rollout if rollout is not None else 0}"


def _add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> None:
    if not usage:
        return
    for key in _USAGE_KEYS:
        total[key] += int(usage.get(key) or 0)
    total["cached_tokens"] += int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)


def _full_usage(usage: dict[str, int]) -> dict[str, Any]:
    return {
        **{key: usage[key] for key in _USAGE_KEYS},
        "input_tokens_details": {"cached_tokens": usage["cached_tokens"]},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


call_tier = _call
"""A call to another tier within the call deadline, its failure the rollout's (the harness episode's too)."""
session_id = _session_id
"""A rollout's session id (`task:rollout`): what keeps its model calls on one replica."""
