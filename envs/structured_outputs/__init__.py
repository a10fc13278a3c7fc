"""Structured outputs, single turn: the answer must be JSON that validates against the row's JSON schema.

Rows are NeMo Gym's `structured_outputs` rows: the schema as JSON text in
`schema_str` (its older datasets call the field `schema`; both load) and
`schema_type` (only `json` is scored here). The reward is
`gym_serve.verifiers.json_schema`'s, as NeMo Gym scores: 1.0 when the whole answer
is JSON that validates, else 0.0 (JSON in a fence or in prose is a `parse_error`;
`config: {lenient_parse: true}` accepts those, explicitly). The schema is made
strict first (every declared property required, no others); `config: {strict:
false}` uses it as written. `format` is not checked, as in NeMo Gym (`config:
{check_formats: true}` checks it).

Rows with `response_mode: tool_call` (NeMo Gym's v4) answer with a function call
instead: the episode ends at the model's first call (nothing runs), which must be the
only call, named `tool_name` when the row names one; its arguments (or their
`tool_payload_key` entry) are the JSON validated, as NeMo Gym scores them.

Where we differ from NeMo Gym: a content-free answer (every value null, blank or empty)
scores 0 (`error_type: content_free`) on every row whose schema has room for content;
`config: {pay_content_free: true}` pays it, as NeMo Gym does. `error_type`,
`error_message` and `error_path` say why a rollout scored 0.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.json_schema import (
    MAX_CHARS,
    JsonSchemaResult,
    load_schema,
    verify_json,
    verify_value,
)
from gym_serve.wire.responses import function_calls


class SchemaTask(Task):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    schema_str: str | None = None
    """The JSON schema as JSON text (NeMo Gym's field)."""
    legacy_schema: str | dict[str, Any] | None = Field(default=None, alias="schema")
    """The same under NeMo Gym's earlier name `schema` (JSON text, or an object)."""
    schema_type: str = "json"
    """The answer's format; NeMo Gym also has yaml, xml, toml and csv rows, which this env refuses."""
    response_mode: Literal["text", "tool_call"] = "text"
    """`tool_call`: the answer is a function call whose arguments are the JSON (NeMo Gym's v4 rows)."""
    tool_name: str | None = None
    """The function the answer must call (tool-call rows; any one call when unset)."""
    tool_payload_key: str | None = None
    """The argument holding the JSON (tool-call rows; the whole arguments when unset)."""

    @model_validator(mode="after")
    def _one_schema(self) -> SchemaTask:
        if (self.schema_str is None) == (self.legacy_schema is None):
            raise ValueError("a row needs exactly one of `schema_str` (or its older name `schema`)")
        if self.schema_type.lower() != "json":
            raise ValueError(f"`schema_type` must be `json` here, got `{self.schema_type}`")
        try:  # a broken schema is the row's fault: bad input, found before any rollout
            load_schema(self.schema_value)
        except ValueError as e:
            raise ValueError(f"`{'schema_str' if self.schema_str is not None else 'schema'}`: {e}") from e
        return self

    @property
    def schema_value(self) -> str | dict[str, Any]:
        return self.schema_str if self.schema_str is not None else self.legacy_schema  # type: ignore[return-value]


class StructuredOutputsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strict: bool = Field(default=True, description="Require every declared property and no others (NeMo Gym's).")
    lenient_parse: bool = Field(
        default=False, description="Also read JSON from a ```json fence or from prose (NeMo Gym does not)."
    )
    check_formats: bool = Field(
        default=False, description="Check JSON Schema `format` (email, date...); NeMo Gym 0.7.0 does not."
    )
    pay_content_free: bool = Field(
        default=False,
        description="Pay an answer with no content (all null, blank, empty) that validates, as NeMo Gym does.",
    )
    max_chars: int = Field(default=MAX_CHARS, ge=1, description="Longer answers score 0 unparsed.")


class StructuredOutputs(Environment[SchemaTask, None]):
    Config = StructuredOutputsConfig
    execute_tool_calls = False  # a tool-call row's call *is* the answer; text rows offer no tools

    async def verify(self, task: SchemaTask, response: Response) -> Verdict:
        config = self.config
        options = {"strict": config.strict, "check_formats": config.check_formats}
        options["pay_content_free"] = config.pay_content_free
        if task.response_mode == "tool_call":
            result = _tool_call_verdict(task, response.output, options)
        else:
            text = response.output_text()
            result = verify_json(
                text, task.schema_value, lenient_parse=config.lenient_parse, max_chars=config.max_chars, **options
            )
        return Verdict(
            reward=result.reward,
            fields={"error_type": result.error_type, "error_message": result.error, "error_path": result.error_path},
        )


def _tool_call_verdict(task: SchemaTask, output: list[dict[str, Any]], options: dict[str, bool]) -> JsonSchemaResult:
    """NeMo Gym's tool-call scoring: exactly one call, the right name, parseable arguments, the payload validates."""
    calls = function_calls(output)
    if len(calls) != 1:
        kind = "missing_tool_call" if not calls else "multiple_tool_calls"
        names = ", ".join(str(c.get("name")) for c in calls) or "none"
        return JsonSchemaResult(0.0, error_type=kind, error=f"expected exactly one function call, got: {names}")
    call = calls[0]
    if task.tool_name and call.get("name") != task.tool_name:
        return JsonSchemaResult(
            0.0, error_type="wrong_tool_name", error=f"expected a call to `{task.tool_name}`, got `{call.get('name')}`"
        )
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as e:
            return JsonSchemaResult(0.0, error_type="tool_arguments_parse_error", error=str(e)[:300])
    if task.tool_payload_key:
        if not isinstance(arguments, dict) or task.tool_payload_key not in arguments:
            return JsonSchemaResult(
                0.0, error_type="missing_tool_payload_key", error=f"no `{task.tool_payload_key}` in the arguments"
            )
        arguments = arguments[task.tool_payload_key]
    return verify_value(arguments, task.schema_value, **options)
