"""Structured outputs, single turn: the answer must be JSON that validates against the row's JSON schema.

Rows are NeMo Gym's `structured_outputs` rows: the schema as JSON text in
`schema_str` (its older datasets call the field `schema`; both load) and
`schema_type` (only `json` is scored here). The reward is
`gym_serve.verifiers.json_schema`'s, as NeMo Gym scores: 1.0 when the whole answer
is JSON that validates, else 0.0 (JSON in a fence or in prose is a `parse_error`;
`config: {lenient_parse: true}` accepts those, explicitly). The schema is made
strict first (every declared property required, no others); `config: {strict:
false}` uses it as written. `error_type`, `error_message` and `error_path` say why
a rollout scored 0.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.json_schema import MAX_CHARS, load_schema, verify_json


class SchemaTask(Task):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    schema_str: str | None = None
    """The JSON schema as JSON text (NeMo Gym's field)."""
    legacy_schema: str | dict[str, Any] | None = Field(default=None, alias="schema")
    """The same under NeMo Gym's earlier name `schema` (JSON text, or an object)."""
    schema_type: str = "json"
    """The answer's format; NeMo Gym also has yaml, xml, toml and csv rows, which this env refuses."""

    @model_validator(mode="after")
    def _one_schema(self) -> SchemaTask:
        if (self.schema_str is None) == (self.legacy_schema is None):
            raise ValueError("a row needs exactly one of `schema_str` (or its older name `schema`)")
        if self.schema_type.lower() != "json":
            raise ValueError(f"`schema_type` must be `json` here, got `{self.schema_type}`")
        load_schema(self.schema_value)  # a broken schema is the row's fault: bad input, found before any rollout
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
    max_chars: int = Field(default=MAX_CHARS, ge=1, description="Longer answers score 0 unparsed.")


class StructuredOutputs(Environment[SchemaTask, None]):
    Config = StructuredOutputsConfig

    async def verify(self, task: SchemaTask, response: Response) -> Verdict:
        result = verify_json(
            response.output_text(),
            task.schema_value,
            strict=self.config.strict,
            lenient_parse=self.config.lenient_parse,
            max_chars=self.config.max_chars,
        )
        return Verdict(
            reward=result.reward,
            fields={"error_type": result.error_type, "error_message": result.error, "error_path": result.error_path},
        )
