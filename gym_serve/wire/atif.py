"""ATIF v1.7, the Agent Trajectory Interchange Format: the fields NeMo Gym 0.7 reads and writes (`atif_v1_7.py`).

A trajectory is its agent (name, version, model, tools) and its steps, in
order: `system` and `user` steps carry a message; an `agent` step carries what
one model call produced — the message, `reasoning_content`, `tool_calls` — the
`observation` of those calls (each result naming its `source_call_id`), and
`metrics` (token counts and, where the tier gave them, `prompt_token_ids`,
`completion_token_ids` and `logprobs`). `final_metrics` totals the tokens.
Whatever a producer keeps beyond that lives in an `extra` object (ours under
`extra.gym_serve`, NeMo Gym's under `extra.nemo_gym`).

Like NeMo Gym's models these are strict: an unknown field is an error, not
silently dropped, so a file that reads here says what it says.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AtifAgent",
    "AtifContentPart",
    "AtifFinalMetrics",
    "AtifObservation",
    "AtifObservationResult",
    "AtifStep",
    "AtifStepMetrics",
    "AtifToolCall",
    "AtifTrajectory",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifContentPart(_Strict):
    """A part of a multipart message: text, or an image by path."""

    type: Literal["text", "image"]
    text: str | None = None
    source: dict[str, Any] | None = None


AtifContent = str | list[AtifContentPart]


class AtifAgent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class AtifObservationResult(_Strict):
    source_call_id: str | None = None
    content: AtifContent | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Strict):
    results: list[AtifObservationResult]


class AtifStepMetrics(_Strict):
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None

    @field_validator("logprobs")
    @classmethod
    def _finite(cls, values: list[float] | None) -> list[float] | None:
        if values is not None and not all(math.isfinite(v) for v in values):
            raise ValueError("log-probabilities must be finite numbers")
        return values


class AtifFinalMetrics(_Strict):
    total_prompt_tokens: int | None = Field(default=None, ge=0)
    total_completion_tokens: int | None = Field(default=None, ge=0)
    total_cached_tokens: int | None = Field(default=None, ge=0)
    total_cost_usd: float | None = Field(default=None, ge=0)
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class AtifStep(_Strict):
    step_id: int = Field(ge=1)
    source: Literal["system", "user", "agent"]
    message: AtifContent
    timestamp: str | None = None
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifStepMetrics | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    is_copied_context: bool | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_fields_on_agent_steps(self) -> AtifStep:
        if self.source != "agent":
            given = [name for name in _AGENT_ONLY if getattr(self, name) is not None]
            if given:
                raise ValueError(f"a {self.source} step cannot have {', '.join(given)} (agent steps only)")
        return self


_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class AtifTrajectory(_Strict):
    """One ATIF v1.7 trajectory (one rollout)."""

    schema_version: Literal["ATIF-v1.7"]
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    subagent_trajectories: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _steps_in_order(self) -> AtifTrajectory:
        for position, step in enumerate(self.steps, start=1):
            if step.step_id != position:
                raise ValueError(f"steps[{position - 1}].step_id is {step.step_id}; steps are numbered 1, 2, ...")
            calls = {call.tool_call_id for call in step.tool_calls or []}
            for result in step.observation.results if step.observation else []:
                if result.source_call_id is not None and result.source_call_id not in calls:
                    unknown = result.source_call_id
                    raise ValueError(f"step {step.step_id}: an observation names an unknown call {unknown!r}")
        return self
