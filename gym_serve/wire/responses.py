"""Wire types: the subset of the OpenAI Responses API that agents, models and
environments exchange, and the input / rollout rows of NeMo Gym's JSONL files.

Every model allows extra fields (`extra="allow"`): rows carry task fields the
verifier needs, and output items carry training fields (`prompt_token_ids`,
`generation_token_ids`, `generation_log_probs`) that must survive untouched.

The hot path (the agent loop) works on plain dicts and validates only at the
edges: a row is validated once where it enters (an input file, `/run`,
`/v1/rollouts`), a response once when it is verified. These models are the one
definition of a row: `row_problems` reports everything wrong with one, each
problem with the dotted path of its field (`responses_create_params.input.2.role`).

What a row must be (what OpenAI's Responses API and the model tier would refuse
later, or worse, accept and score): `input` a non-empty string or a non-empty
list of typed items (`message` with a role of user/system/developer/assistant,
`function_call`, `function_call_output`, `reasoning`); every
`function_call_output` answers an earlier `function_call` of the same `call_id`;
`tools` are functions whose `parameters` is a valid JSON Schema for an object;
`temperature` in [0, 2], `top_p` in (0, 1], `max_output_tokens` at least 1;
`_ng_task_index` a non-negative integer; `agent_ref.name` a non-empty string; nothing in it nested deeper
than `MAX_DEPTH` (what the JSON writers, the schema checker and pickling between tiers all handle), and no
number the JSON writer cannot write (`NaN`, the infinities, an integer beyond 64 bits).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from gym_serve.wire.harness import HarnessResult
from gym_serve.wire.jsonl import unwritable
from gym_serve.wire.pieces import field_path, user_message

__all__ = [
    "with_response_defaults",
    "AgentRef",
    "FunctionCall",
    "FunctionCallOutput",
    "MAX_DEPTH",
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
    "row_problems",
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


class ContentPart(_Open):
    """A part of a message's content: `input_text`, `output_text`, `input_image`, ..."""

    type: str = Field(min_length=1)


class InputMessage(_Open):
    """A message the conversation starts with (user, system, developer) or an earlier assistant turn."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]


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
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: str | None = "completed"


class FunctionCallOutput(_Open):
    """A tool's answer, as the model sees it."""

    type: Literal["function_call_output"] = "function_call_output"
    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]


class SummaryText(_Open):
    type: Literal["summary_text"] = "summary_text"
    text: str


class Reasoning(_Open):
    """Reasoning the model produced before answering (e.g. a `<think>` block)."""

    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)


def _item_type(item: Any) -> str | None:
    if isinstance(item, dict):
        kind = item.get("type", "message")
        return kind if isinstance(kind, str) else None
    return getattr(item, "type", None)


InputItem = Annotated[
    Annotated[InputMessage, Tag("message")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[Reasoning, Tag("reasoning")],
    Discriminator(_item_type),
]
"""An item of a conversation, told apart by its `type` (a bare `{role, content}` is a message)."""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class FunctionTool(_Open):
    """A tool the model may call, in the Responses API's flat form."""

    type: Literal["function"] = "function"
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None

    @field_validator("name")
    @classmethod
    def _api_name(cls, name: str) -> str:
        if not _TOOL_NAME.match(name):
            raise ValueError(f"a tool name is 1-64 letters, digits, `_` or `-`; got {name!r}")
        return name

    @field_validator("parameters")
    @classmethod
    def _json_schema(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        if not parameters:
            return parameters
        if parameters.get("type", "object") != "object":
            raise ValueError(f"a function's `parameters` describe an object; got type {parameters.get('type')!r}")
        try:
            problem = _schema_problem(json.dumps(parameters, sort_keys=True))
        except RecursionError:  # past what Python's recursion allows a JSON encoder (MAX_DEPTH keeps rows below)
            problem = "not a valid JSON Schema: nested too deeply to check"
        if problem is not None:
            raise ValueError(problem)
        return parameters


@functools.lru_cache(maxsize=1024)
def _schema_problem(schema_json: str) -> str | None:
    """What is wrong with a JSON Schema (canonical JSON), or None; remembered per schema.

    Every row of a dataset usually carries the same few tools, and checking a
    schema against its metaschema is the costliest thing a row's validation
    does (over half of the driver's CPU at 256 rollouts in flight, py-spy).
    """
    schema = json.loads(schema_json)
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"not a valid JSON Schema at {e.json_path}: {e.message}"
    except RecursionError:  # the checker recurses per level of the schema
        return "not a valid JSON Schema: nested too deeply to check"
    return None


class ResponseCreateParams(_Open):
    """An OpenAI Responses create request (`responses_create_params`)."""

    input: Annotated[str, Field(min_length=1)] | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    model: str | None = None
    metadata: dict[str, Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _outputs_answer_calls(self) -> ResponseCreateParams:
        """Every `function_call_output` answers an earlier `function_call` (the API refuses an orphan)."""
        if isinstance(self.input, str):
            return self
        called: set[str] = set()
        for index, item in enumerate(self.input):
            if isinstance(item, FunctionCall):
                called.add(item.call_id)
            elif isinstance(item, FunctionCallOutput) and item.call_id not in called:
                raise ValueError(
                    f"`input[{index}]` is a `function_call_output` for call_id `{item.call_id}`, "
                    "which no earlier `function_call` in `input` made"
                )
        return self

    def input_items(self) -> list[dict[str, Any]]:
        """The input as a list of items; a bare string is one user message."""
        if isinstance(self.input, str):
            return [user_message(self.input)]
        return [item.model_dump(exclude_unset=True) for item in self.input]


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
    harness: HarnessResult | None = None
    """A harness agent's outcome (its reply, exit status, output, workspace files); None for the tool loop."""

    def output_text(self) -> str:
        """The text of the last assistant message, or '' if there is none."""
        return output_text(self.output)

    def function_calls(self) -> list[FunctionCall]:
        return [FunctionCall.model_validate(item) for item in function_calls(self.output)]


class AgentRef(_Open):
    type: str | None = None
    name: str = Field(min_length=1)


Index = Annotated[int, Strict(), Field(ge=0)]


class InputRow(_Open):
    """One task: `responses_create_params` plus whatever fields the verifier needs."""

    responses_create_params: ResponseCreateParams
    agent_ref: AgentRef | None = None
    ng_task_index: Index | None = Field(default=None, alias="_ng_task_index")
    ng_rollout_index: Index | None = Field(default=None, alias="_ng_rollout_index")


class RolloutRow(InputRow):
    """A finished rollout: the input row's fields plus the episode and its reward."""

    response: Response
    reward: float


MAX_DEPTH = 100
"""How deep objects and arrays may nest in a row. A real row nests a dozen levels (a tool's schema inside its
parameters); the JSON writers stop at 255 (orjson), Python's recursion (the schema checker, pickling a row
between tiers) near a thousand frames, and a row any of them refuses would fail a rollout, or a whole
collection, far from where it came in."""


def row_problems(row: Any) -> list[tuple[str, str]]:
    """Everything wrong with an input row, as `(field path, what is wrong)`; empty when it is a valid row.

    >>> row_problems({"responses_create_params": {"input": "hi", "temperature": 3}})
    [('responses_create_params.temperature', 'Input should be less than or equal to 2')]
    >>> deep: list = []
    >>> for _ in range(MAX_DEPTH):
    ...     deep = [deep]
    >>> row_problems({"responses_create_params": {"input": "hi"}, "notes": deep})[0][1]
    'nested more than 100 levels deep (objects and arrays)'
    """
    if not isinstance(row, dict):
        return [("(row)", f"a row is a JSON object, got {type(row).__name__}")]
    problem = unwritable(row, max_depth=MAX_DEPTH)  # what would stop the row being pickled, checked or written
    if problem is not None:
        return [(problem[0] or "(row)", problem[1])]
    try:  # strictly: the row goes on as it is, not as pydantic would coerce it (`0` is no boolean, "1" no number)
        InputRow.model_validate(row, strict=True)
    except ValidationError as e:
        params = row.get("responses_create_params")
        given = params.get("input") if isinstance(params, dict) else None
        problems = [(_path(err["loc"]), _message(err)) for err in e.errors() if not _other_branch(err, given)]
        if not isinstance(given, str | list | None):
            problems = [
                (f, "must be a string or a non-empty list of items" if f == "responses_create_params.input" else m)
                for f, m in problems
            ]
        return problems
    return []


def _other_branch(error: Any, given: Any) -> bool:
    """An error of the `input` branch (string or list) the row did not take: noise."""
    loc = error["loc"]
    if loc[:2] != ("responses_create_params", "input") or len(loc) < 3:
        return False
    branch = str(loc[2])
    if isinstance(given, list):
        return branch.startswith("constrained-str") or branch == "str"
    if isinstance(given, str):
        return branch.startswith("list")
    return branch.startswith("list")  # neither: the string branch's "should be a valid string" says it


def _path(loc: tuple[int | str, ...]) -> str:
    """`responses_create_params.input.2.role` (union branches pydantic adds, e.g. `list[...]`, left out)."""
    parts = [part for part in loc if not (isinstance(part, str) and ("[" in part or part in _BRANCHES))]
    return field_path(parts) or "(row)"


_BRANCHES = {"str", "list", "message", "function_call", "function_call_output", "reasoning", "int", "constrained-str"}


def _message(error: Any) -> str:
    if error["type"] == "union_tag_invalid":
        return (
            f"unknown item type {error['input'].get('type')!r}; known: message, function_call, "
            "function_call_output, reasoning"
        )
    return str(error["msg"]).removeprefix("Value error, ")


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


def with_response_defaults(response: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A response with the fields a Responses object must have, where the model tier left them out.

    NeMo Gym validates every response as an OpenAI `Response` (its servers' `/verify`
    and its consumers' `BaseVerifyResponse`); a replayed or synthetic model, or a
    response assembled from many turns, has fewer fields than the OpenAI API gives.
    `params` is the request (`responses_create_params`) the response answers.
    """
    defaults = {
        "id": "resp_gym_serve",
        "object": "response",
        "created_at": 0.0,
        "model": params.get("model") or "unknown",
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "tool_choice": params.get("tool_choice", "auto"),
        "tools": params.get("tools") or [],
    }
    return {**defaults, **{k: v for k, v in response.items() if v is not None or k not in defaults}}
