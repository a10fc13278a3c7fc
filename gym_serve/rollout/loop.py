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
conversation as a user message (kept in the checkpoint, so a resumed episode
sends the same prompt).

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

Every turn (a model call and what follows it) ends at a turn boundary, where the loop's progress is a
`Checkpoint` (`gym_serve.rollout.checkpoint`): the items so far, the state, the usage. The loop reports each
turn's record (`on_turn`), can start from a checkpoint instead of from `reset` (`resume`: a retried attempt,
a resumed collection, a continued partial; only where the environment's tools are replay-safe), and stops at
a boundary when asked (`stop`), raising `Paused`. A row that resumed says from which turn (`resumed_at_turn`);
`_gs_timings.turns` counts the episode's turns, restored ones included.

The conversation stays a list of plain dicts: items are appended, never
re-validated or re-serialized, so a long episode costs O(items), not O(n²).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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
from gym_serve.rollout.checkpoint import Checkpoint, Paused
from gym_serve.wire.pieces import input_items, user_message
from gym_serve.wire.responses import with_response_defaults
from gym_serve.wire.tokens import policy_version_range

__all__ = ["AgentConfig", "EnvClient", "ModelClient", "OnTurn", "call_tier", "run_episode", "session_id"]

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

    async def snapshot(self, state: Any) -> str | None: ...

    async def restore(self, snapshot: str, state: Any) -> Any: ...


OnTurn = Callable[[dict[str, Any]], None]
"""Hears the record of every completed turn (`gym_serve.rollout.checkpoint`)."""


async def run_episode(
    row: dict[str, Any],
    *,
    model: ModelClient,
    env: EnvClient,
    env_info: EnvInfo,
    config: AgentConfig,
    resume: Checkpoint | None = None,
    on_turn: OnTurn | None = None,
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Run one rollout of `row` and return the rollout row (input fields + response + reward).

    `resume`: go on from this checkpoint instead of starting over (only where the environment's tools are
    replay-safe; elsewhere the episode starts over). `on_turn`: hears each completed turn's record. `stop`:
    asked before each model call (and before `reset`); when it says so the loop raises `Paused`.
    """
    started = time.perf_counter()
    timings = {"model_s": 0.0, "tool_s": 0.0, "verify_s": 0.0, "model_calls": 0, "tool_calls": 0}
    session = _session_id(row)
    progress = resume if resume is not None and resume.turn and env_info.replay_safe_tools else None
    resumed_at = progress.turn if progress is not None else None
    if progress is None:
        if stop is not None and stop():
            raise Paused(0)
        progress = Checkpoint()
        if env_info.has_seed:
            progress.state = await _call("environment `seed`", env.seed(row), EnvError, config)
            progress.opening = _opening(progress.state)
    elif progress.sandbox is not None and env_info.snapshots:
        restored = env.restore(progress.sandbox, progress.state)
        progress.state = await _call("environment `restore`", restored, EnvError, config)

    params = _with_opening(row["responses_create_params"], progress.opening)
    turn = _Turn(row, params, model, env, env_info, config, session, timings)
    while not progress.ended and progress.turn < config.max_steps:
        if stop is not None and stop():
            raise Paused(progress.turn)
        record = await turn.next(progress)
        progress.extend(record)
        if on_turn is not None:
            on_turn(record)

    output = progress.items
    episode = {**progress.response, "output": output, "usage": _full_usage(progress.usage)}
    episode = with_response_defaults(episode, params)  # what NeMo Gym's `BaseVerifyResponse` requires
    t0 = time.perf_counter()
    verdict = await _call("environment `verify`", env.verify(row, episode, progress.state), VerifyError, config)
    timings["verify_s"] = time.perf_counter() - t0
    if env_info.verify_timeout_s is not None:
        timings["verify_deadline_s"] = env_info.verify_timeout_s
    timings["turns"] = progress.turn
    timings["total_s"] = time.perf_counter() - started
    extra: dict[str, Any] = {"step_rewards": progress.step_rewards} if progress.step_rewards else {}
    versions = policy_version_range(output)
    if versions is not None:
        extra["policy_version_min"], extra["policy_version_max"] = versions
    if resumed_at is not None:
        extra["resumed_at_turn"] = resumed_at
    return {
        **row,
        "responses_create_params": params,
        "response": episode,
        "mask_sample": False,
        **verdict,
        **extra,
        "terminated": progress.terminated,
        "truncated": not progress.terminated,
        "_gs_timings": timings,
    }


class _Turn:
    """One turn at a time: a model call, then its tool calls or the environment's user turn; its record."""

    def __init__(
        self,
        row: dict[str, Any],
        params: dict[str, Any],
        model: ModelClient,
        env: EnvClient,
        env_info: EnvInfo,
        config: AgentConfig,
        session: str | None,
        timings: dict[str, Any],
    ) -> None:
        self.row, self.model, self.env, self.env_info, self.config = row, model, env, env_info, config
        self.session, self.timings = session, timings
        self.params = params
        self.tools = params.get("tools") or env_info.tools
        self.conversation = input_items(params["input"])

    async def next(self, progress: Checkpoint) -> dict[str, Any]:
        """Run the turn after `progress` and return its record (`gym_serve.rollout.checkpoint`)."""
        config, env, timings = self.config, self.env, self.timings
        request = {**self.params, "input": self.conversation + progress.items, "tools": self.tools}
        t0 = time.perf_counter()
        response = await _call("model `responses`", self.model.responses(request, self.session), ModelError, config)
        timings["model_s"] += time.perf_counter() - t0
        timings["model_calls"] += 1
        items: list[dict[str, Any]] = list(response.get("output") or [])
        state = progress.state
        record: dict[str, Any] = {"turn": progress.turn + 1, "items": items, "usage": _usage_of(response)}
        if progress.turn == 0 and progress.opening is not None:
            record["opening"] = progress.opening
        ended = terminated = False
        calls = [item for item in items if item.get("type") == "function_call"]
        if self.env_info.steps_every_turn:  # the turn is one step, calls and all
            step_call = env.user_turn(self.row, response, state)
            step, state = await _call("environment `user_turn`", step_call, EnvError, config)
            record["step_reward"] = float(step["reward"])
            if step["terminated"] or step.get("truncated"):
                ended, terminated = True, bool(step["terminated"])
            else:
                items.extend(step.get("tool_outputs") or [])
                if step.get("message"):
                    items.append(user_message(step["message"]))
        elif response.get("status") == "incomplete":
            ended = True
        elif calls and not self.env_info.execute_tool_calls:
            ended = terminated = True  # the calls are the answer: verify them, run nothing
        elif not calls:
            if not any(item.get("type") == "message" for item in items):
                # Reasoning only, or nothing, and not cut off: the trajectory ends unfinished, as NeMo Gym's
                # simple_agent ends it (same status and termination reason), and is verified as it stands.
                reason = "incomplete_reasoning" if items else "empty_output"
                metadata = {**(response.get("metadata") or {}), "ng_termination_reason": reason}
                response = {**response, "status": "incomplete", "metadata": metadata}
                ended = True
            elif not self.env_info.has_user_turn:
                ended = terminated = True
            else:
                so_far = {**response, "output": progress.items + items}
                call = env.user_turn(self.row, so_far, state)
                user, state = await _call("environment `user_turn`", call, EnvError, config)
                if user is None:
                    ended = terminated = True
                else:
                    record["step_reward"] = float(user["reward"])
                    if user.get("message"):
                        items.append(user_message(user["message"]))
                    ended = terminated = bool(user["terminated"])
        else:
            t0 = time.perf_counter()
            outputs, state = await _call("environment `call_tools`", env.call_tools(calls, state), ToolError, config)
            timings["tool_s"] += time.perf_counter() - t0
            timings["tool_calls"] += len(calls)
            items.extend(outputs)
        if self.env_info.snapshots:
            record["sandbox"] = await _call("environment `snapshot`", env.snapshot(state), EnvError, config)
        record.update(
            state=state,
            response={k: v for k, v in response.items() if k not in ("output", "usage")},
            ended=ended,
            terminated=terminated,
        )
        return record


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


def _session_id(row: dict[str, Any]) -> str | None:
    task, rollout = row.get("_ng_task_index"), row.get("_ng_rollout_index")
    if task is None:
        return None
    return f"{task}:{rollout if rollout is not None else 0}"


def _usage_of(response: dict[str, Any]) -> dict[str, int]:
    """A model call's token counts, flat (what a turn's record carries and a checkpoint sums)."""
    usage = response.get("usage") or {}
    counts = {key: int(usage.get(key) or 0) for key in _USAGE_KEYS}
    counts["cached_tokens"] = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    return counts


def _full_usage(usage: dict[str, int]) -> dict[str, Any]:
    """The episode's summed usage in the Responses API's shape."""
    return {
        **{key: usage.get(key, 0) for key in _USAGE_KEYS},
        "input_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


call_tier = _call
"""A call to another tier within the call deadline, its failure the rollout's (the harness episode's too)."""
session_id = _session_id
"""A rollout's session id (`task:rollout`): what keeps its model calls on one replica."""


def _opening(state: Any) -> str | None:
    """The environment's reset observation (`OPENING_KEY` in the seeded state), taken out of the state."""
    opening = state.pop(OPENING_KEY, None) if isinstance(state, dict) else None
    return opening if isinstance(opening, str) and opening else None


def _with_opening(params: dict[str, Any], opening: str | None) -> dict[str, Any]:
    """The request with the environment's reset observation as a last user message, as NeMo Gym's
    gymnasium_agent sends it; the request itself where there is none."""
    if opening is None:
        return params
    return {**params, "input": [*input_items(params["input"]), user_message(opening)]}
