"""Tools: typed async methods of an environment, marked with `@tool`.

The JSON schema the model sees is derived from the method's signature (a
pydantic model built from the parameters), its description from the
docstring. The same model validates the arguments the model sends, so a schema
and its checks can never drift apart.

A parameter named `state` is not an argument: it receives the rollout's state
(see `Environment.seed`) and is left out of the schema.

One model turn's calls share a time budget (`Environment.tool_turn_budget_s`): a
tool that runs something slow bounds it by `turn_time_left()`.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from gym_serve.wire.pieces import field_path

__all__ = ["ToolSpec", "tool", "tool_turn", "turn_time_left"]

STATE_PARAM = "state"
_TOOL_MARK = "__gym_serve_tool__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def tool(fn: F) -> F:
    """Mark an `async def` method of an `Environment` as a tool the model may call."""
    is_async = inspect.iscoroutinefunction(fn)  # checked apart: the check would narrow `fn` away from `F`
    if not is_async:
        raise TypeError(f"@tool `{fn.__qualname__}` must be `async def`, got a plain function")
    setattr(fn, _TOOL_MARK, True)
    return fn


_TURN_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("turn_deadline", default=None)


@contextlib.contextmanager
def tool_turn(budget_s: float) -> Iterator[float]:
    """One model turn's tool calls, within `budget_s` of now: the deadline, which `turn_time_left` reads."""
    deadline = time.monotonic() + budget_s
    token = _TURN_DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _TURN_DEADLINE.reset(token)


def turn_time_left() -> float | None:
    """Seconds left of the running turn's tool budget, for a tool that bounds its own work by it (a workspace's
    `bash`); None outside a turn."""
    deadline = _TURN_DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def is_tool(obj: Any) -> bool:
    return callable(obj) and getattr(obj, _TOOL_MARK, False)


@dataclass(frozen=True)
class ToolSpec:
    """A tool's name, description, argument model and whether it takes the rollout state."""

    name: str
    description: str
    arguments: type[BaseModel]
    takes_state: bool

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> ToolSpec:
        # Resolve string annotations (`from __future__ import annotations`) in the tool's module.
        signature = inspect.signature(fn, eval_str=True)
        doc = inspect.getdoc(fn) or ""
        arg_docs = _arg_docs(doc)
        fields: dict[str, Any] = {}
        takes_state = False
        for name, param in signature.parameters.items():
            if name == "self":
                continue
            if name == STATE_PARAM:
                takes_state = True
                continue
            if param.annotation is inspect.Parameter.empty:
                raise TypeError(f"tool `{fn.__qualname__}`: parameter `{name}` needs a type annotation")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[name] = (param.annotation, Field(default, description=arg_docs.get(name, "")))
        model = create_model(
            f"{fn.__name__}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        return cls(name=fn.__name__, description=_summary(doc), arguments=model, takes_state=takes_state)

    def schema(self) -> dict[str, Any]:
        """The tool in the Responses API's `tools` form.

        >>> async def get_weather(self, city: str, state: None) -> dict:
        ...     \"\"\"Get the current weather in a city.
        ...
        ...     Args:
        ...         city: The city's name.
        ...     \"\"\"
        >>> schema = ToolSpec.from_function(get_weather).schema()
        >>> schema["name"], schema["description"]
        ('get_weather', 'Get the current weather in a city.')
        >>> schema["parameters"]["properties"], schema["parameters"]["required"]
        ({'city': {'description': "The city's name.", 'type': 'string'}}, ['city'])
        """
        parameters = self.arguments.model_json_schema()
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        parameters.setdefault("required", [])
        parameters["additionalProperties"] = False
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": parameters,
            "strict": True,
        }

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """Parse and validate the model's JSON arguments; raises `ValueError` with a model-readable message."""
        try:
            raw = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"arguments for `{self.name}` are not valid JSON ({e.msg} at position {e.pos})") from e
        except (ValueError, RecursionError) as e:  # a number past 4300 digits, `[[[[...` past the parser's stack
            raise ValueError(f"arguments for `{self.name}` cannot be read: {e}") from e
        if not isinstance(raw, dict):
            raise ValueError(f"arguments for `{self.name}` must be a JSON object, got {type(raw).__name__}")
        try:
            validated = self.arguments.model_validate(raw)
        except ValidationError as e:
            problems = "; ".join(f"`{field_path(err['loc']) or '(root)'}`: {err['msg']}" for err in e.errors())
            raise ValueError(f"invalid arguments for `{self.name}`: {problems}") from e
        return {name: getattr(validated, name) for name in type(validated).model_fields}


def _summary(doc: str) -> str:
    """The docstring up to its `Args:` section."""
    return re.split(r"\n\s*(Args|Arguments|Returns|Raises):", doc, maxsplit=1)[0].strip()


def _arg_docs(doc: str) -> dict[str, str]:
    """Per-parameter descriptions from a Google-style `Args:` section."""
    match = re.search(r"\n\s*(?:Args|Arguments):\s*\n(.*?)(?:\n\s*(?:Returns|Raises):|\Z)", doc, re.S)
    if not match:
        return {}
    docs: dict[str, str] = {}
    for line in match.group(1).splitlines():
        item = re.match(r"\s*(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
        if item:
            docs[item.group(1)] = item.group(2).strip()
    return docs
