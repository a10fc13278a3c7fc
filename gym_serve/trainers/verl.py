"""verl: gym-serve as an agent loop (`AgentLoopBase.run` -> `AgentLoopOutput`, verl 0.9).

Register it with verl's agent-loop YAML (`actor_rollout_ref.rollout.agent.agent_loop_config_path`):

    - name: gym_serve
      _target_: gym_serve.trainers.verl.GymServeAgentLoop
      url: http://127.0.0.1:8000          # the gym-serve ingress; leave it out to call the agents in-cluster
      agent: weather                      # rows without `agent_ref` go to this agent application

and select it per row (dataset column `agent_name: gym_serve`) or for every row
(`actor_rollout_ref.rollout.agent.default_agent_loop=gym_serve`). The row sent
to gym-serve is the dataset row's `extra_info.gym_serve_row` (a NeMo Gym row);
without one, a row is made from `raw_prompt`.

The contract (verl/experimental/agent_loop/agent_loop.py, 0.9.1): verl builds
one loop per trajectory (`rollout.n` copies of each prompt, grouped by `uid`)
and calls `await loop.run(sampling_params, **row_fields)`; the output is
`prompt_ids`, `response_ids` (model and tool tokens), `response_mask`
(1 = model token), `response_logprobs`, `reward_score`, `num_turns`, `metrics`
(required) and `extra_fields`, where `min_global_steps` / `max_global_steps`
must be ints (the v1 trainer tags trajectories with them: the policy versions
the trajectory saw). verl pads the prompt to `rollout.prompt_length` and the
response to `rollout.response_length`; a longer response is cut there, as
verl's own loops do, and a longer prompt is an error (it would be cut from the
left, losing the task). verl computes advantages itself (by `uid`).

A failed rollout raises `RolloutFailed`: verl's v1 trainer (the default) marks
the prompt group failed and re-requests it (async) or pads it (sync); the v0
path fails the step, as it does for its own loops.

verl 0.9 pins transformers<5.11, so it cannot share gym-serve's environment:
its tests run in verl's own (`scripts/trainer_envs.py`), on verl's real
`AgentLoopOutput` and `AgentLoopWorker` post-processing.
"""

from __future__ import annotations

import os
from typing import Any

from gym_serve.trainers.sequence import (
    RolloutFailed,
    build_sequence,
    check_prompt_length,
    check_tokenizer,
    failure_class,
)
from gym_serve.trainers.source import run_groups

__all__ = ["GymServeAgentLoop", "agent_loop_fields", "gym_row"]


def agent_loop_fields(
    rollout: dict[str, Any],
    *,
    prompt_length: int,
    response_length: int,
    fallback_version: int = 0,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """`AgentLoopOutput`'s fields for one rollout row (`metrics` as a plain dict of `AgentLoopMetrics` fields).

    With verl's `tokenizer`, the rollout's ids are checked to be that tokenizer's (`check_tokenizer`).
    """
    if failure_class(rollout) is not None:
        raise RolloutFailed(rollout)
    s = build_sequence(rollout)
    if tokenizer is not None:
        check_tokenizer(rollout, tokenizer, trainer="verl")
    check_prompt_length(s, prompt_length, setting="actor_rollout_ref.rollout.prompt_length")
    end = min(len(s.completion_ids), response_length)
    timings = rollout.get("_gs_timings") or {}
    output = rollout["response"]["output"]
    turns = len(rollout["responses_create_params"].get("input") or []) + s.calls
    turns += sum(1 for item in output if item.get("type") == "function_call_output" or item.get("role") == "user")
    lowest = s.policy_version_min if s.policy_version_min is not None else fallback_version
    highest = s.policy_version_max if s.policy_version_max is not None else fallback_version
    return {
        "prompt_ids": s.prompt_ids,
        "response_ids": s.completion_ids[:end],
        "response_mask": s.completion_mask[:end],
        "response_logprobs": s.completion_logprobs[:end],
        "reward_score": s.reward if s.reward is not None else 0.0,
        "num_turns": turns,
        "metrics": {
            "generate_sequences": float(timings.get("model_s", 0.0)),
            "tool_calls": float(timings.get("tool_s", 0.0)),
            "compute_score": float(timings.get("verify_s", 0.0)),
        },
        "extra_fields": {
            "min_global_steps": int(lowest),
            "max_global_steps": int(highest),
            "reward_extra_info": {},
            "gym_serve_task_index": s.task_index,
            "gym_serve_rollout_index": s.rollout_index,
        },
    }


def gym_row(fields: dict[str, Any], *, agent: str | None = None) -> dict[str, Any]:
    """The gym-serve row for one verl dataset row: `extra_info.gym_serve_row`, else one made from `raw_prompt`."""
    extra = fields.get("extra_info") or {}
    row = extra.get("gym_serve_row") if isinstance(extra, dict) else None
    if row is None:
        prompt = fields.get("raw_prompt")
        if prompt is None:
            raise ValueError("a verl row needs `extra_info.gym_serve_row` (a NeMo Gym row) or `raw_prompt`")
        row = {"responses_create_params": {"input": list(prompt)}}
    row = dict(row)
    if agent is not None and not (row.get("agent_ref") or {}).get("name"):
        row["agent_ref"] = {"name": agent}
    return row


class GymServeAgentLoop:
    """An agent loop whose trajectories gym-serve runs; verl instantiates it with hydra, one per trajectory.

    It takes the keyword arguments verl passes every agent loop (`trainer_config`,
    `server_manager`, `tokenizer`, ...) and those of its YAML entry (`url`,
    `token_env`, `agent`). It does not use verl's LLM servers: gym-serve samples.
    """

    def __init__(
        self,
        trainer_config: Any,
        *,
        url: str | None = None,
        token_env: str = "GYM_SERVE_TOKEN",
        agent: str | None = None,
        tokenizer: Any = None,
        **_verl: Any,
    ) -> None:
        rollout = trainer_config.config.actor_rollout_ref.rollout
        self.prompt_length = int(rollout.prompt_length)
        self.response_length = int(rollout.response_length)
        self.url = url
        self.token = os.environ.get(token_env)
        self.agent = agent
        self.tokenizer = tokenizer

    async def run(self, sampling_params: dict[str, Any], **fields: Any) -> Any:
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

        row = gym_row(fields, agent=self.agent)
        sampling = {k: sampling_params[k] for k in ("temperature", "top_p") if sampling_params.get(k) is not None}
        async with self._source() as source:
            ((rollout,),) = await run_groups(source, [row], [1], **sampling)
        values = agent_loop_fields(
            rollout,
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            fallback_version=int(fields.get("global_steps") or 0),
            tokenizer=self.tokenizer,
        )
        return AgentLoopOutput(**{**values, "metrics": AgentLoopMetrics(**values["metrics"])})

    def _source(self) -> Any:
        if self.url is not None:
            from gym_serve.client import GymClient

            return GymClient(self.url, token=self.token)
        from gym_serve.collect.stream import ServeRollouts

        return ServeRollouts(default_agent=self.agent)
