"""Wire types: the subset of the OpenAI Responses API that agents, models and
environments exchange, and the input / rollout rows of NeMo Gym's JSONL files.

Every model allows extra fields (`extra="allow"`): rows carry task fields the
verifier needs, and output items carry training fields (`prompt_token_ids`,
`generation_token_ids`, `generation_log_probs`) that must survive untouched.

The hot path (the agent loop) works on plain dicts and validates only at the
edges: a row is validated once when it is read, a response once when it is
verified. These models document the shapes and do that edge validation.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AgentRef",
    "FunctionCall",
    "FunctionCallOutput",
    "FunctionTool",
    "InputMessage",
    "InputRow",
    "OutputMessage",
    "OutputText",
    "Reasoning",
    "Response",
    "ResponseCreateParams",
    "RolloutRow",
    "Usage",
    "function_calls",
    "output_text",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class InputText(_Open):
    type: Literal["input_text"] = "input_text"
    text: str


class OutputText(_Open):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class InputMessage(_Open):
    """A message the conversation starts with (user, system, developer) or an earlier assistant turn."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[dict[str, Any]]


class OutputMessage(_Open):
    """An assistant message the model produced."""

    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["assistant"] = "assistant"
    status: str | None = "completed"
    content: list[OutputText]


class FunctionCall(_Open):
    """The model asks for a tool; `arguments` is a JSON string, as the API sends it."""

    type: Literal["function_call"] = "function_call"
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = "completed"


class FunctionCallOutput(_Open):
    """A tool's answer, as the model sees it."""

    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str


class SummaryText(_Open):
    type: Literal["summary_text"] = "summary_text"
    text: str


class Reasoning(_Open):
    """Reasoning the model produced before answering (e.g. a `<think>` block)."""

    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)


class FunctionTool(_Open):
    """A tool the model may call, in the Responses API's flat form."""

    type: Literal["function"] = "function"
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None


class ResponseCreateParams(_Open):
    """An OpenAI Responses create request (`responses_create_params`)."""

    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    model: str | None = None
    metadata: dict[str, Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None

    def input_items(self) -> list[dict[str, Any]]:
        """The input as a list of items; a bare string is one user message."""
        if isinstance(self.input, str):
            return [{"type": "message", "role": "user", "content": self.input}]
        return list(self.input)


class InputTokensDetails(_Open):
    cached_tokens: int = 0


class OutputTokensDetails(_Open):
    reasoning_tokens: int = 0


class Usage(_Open):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)


class Response(_Open):
    """A Responses object. In a rollout row its `output` holds the whole episode."""

    id: str = ""
    object: Literal["response"] = "response"
    created_at: float = 0.0
    model: str | None = None
    status: str | None = "completed"
    output: list[dict[str, Any]] = Field(default_factory=list)
    usage: Usage | None = None
    incomplete_details: dict[str, Any] | None = None

    def output_text(self) -> str:
        """The text of the last assistant message, or '' if there is none."""
        return output_text(self.output)

    def function_calls(self) -> list[FunctionCall]:
        return [FunctionCall.model_validate(item) for item in function_calls(self.output)]


class AgentRef(_Open):
    type: str | None = None
    name: str


class InputRow(_Open):
    """One task: `responses_create_params` plus whatever fields the verifier needs."""

    responses_create_params: ResponseCreateParams
    agent_ref: AgentRef | None = None
    ng_task_index: int | None = Field(default=None, alias="_ng_task_index")
    ng_rollout_index: int | None = Field(default=None, alias="_ng_rollout_index")


class RolloutRow(InputRow):
    """A finished rollout: the input row's fields plus the episode and its reward."""

    response: Response
    reward: float


def output_text(items: list[dict[str, Any]]) -> str:
    """The text of the last assistant message among `items` ('' if none)."""
    for item in reversed(items):
        if item.get("type", "message") == "message" and item.get("role") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))
    return ""


def function_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `function_call` items among `items`, in order."""
    return [item for item in items if item.get("type") == "function_call"]
