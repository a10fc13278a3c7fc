"""Model text → Responses output items: `<think>` reasoning and Hermes/Qwen `<tool_call>` blocks.

    <think>I should look it up.</think>
    <tool_call>{"name": "get_weather", "arguments": {"city": "SF"}}</tool_call>

becomes a `reasoning` item and a `function_call` item; any other text becomes
an assistant `message`. A `<tool_call>` block that is not valid JSON stays in
the message text, where the environment's verifier (and the trainer) can see
the model's mistake, instead of being dropped.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from gym_serve.wire.chat import split_think

__all__ = ["forced_tool_call_regex", "parse_output", "render_tool_call", "structured_output"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_output(text: str) -> list[dict[str, Any]]:
    """The output items a model's generated text stands for.

    >>> text = '<think>Look it up.</think><tool_call>{"name": "get_weather", "arguments": {"city": "SF"}}</tool_call>'
    >>> [(item["type"], item.get("name"), item.get("arguments")) for item in parse_output(text)]
    [('reasoning', None, None), ('function_call', 'get_weather', '{"city": "SF"}')]
    >>> parse_output('<tool_call>{"name": oops}</tool_call>')[0]["content"][0]["text"]  # malformed: kept in sight
    '<tool_call>{"name": oops}</tool_call>'
    """
    items: list[dict[str, Any]] = []
    reasoning, rest = split_think(text)
    if reasoning:
        items.append({"type": "reasoning", "id": _id("rs"), "summary": [{"type": "summary_text", "text": reasoning}]})
    calls: list[dict[str, Any]] = []

    def take(match: re.Match[str]) -> str:
        try:
            call = json.loads(match.group(1))
            name, arguments = call["name"], call.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError, RecursionError):  # a model may generate any text
            return match.group(0)  # malformed: leave it visible
        calls.append(
            {
                "type": "function_call",
                "id": _id("fc"),
                "call_id": _id("call"),
                "name": str(name),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "status": "completed",
            }
        )
        return ""

    message = _TOOL_CALL.sub(take, rest).strip()
    if message:
        items.append(
            {
                "type": "message",
                "id": _id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": message, "annotations": []}],
            }
        )
    return items + calls


def render_tool_call(name: str, arguments: str) -> str:
    """A function call as the Hermes text a chat template puts in an assistant turn."""
    try:
        parsed: Any = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        parsed = arguments
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': parsed})}\n</tool_call>"


def forced_tool_call_regex(request: dict[str, Any]) -> str | None:
    """`tool_choice: required` (or a named function): a regex the output must match, one Hermes tool call.

    For a model server's structured outputs (a grammar-constrained sampler);
    None when the request leaves the model free. Argument values are shaped by
    their JSON type, so the constrained text always parses.

    >>> import re
    >>> tool = {"name": "f", "parameters": {"properties": {"n": {"type": "integer"}}, "required": ["n"]}}
    >>> regex = forced_tool_call_regex({"tools": [tool], "tool_choice": "required"})
    >>> bool(re.fullmatch(regex, '<tool_call>\\n{"name": "f", "arguments": {"n": 42}}\\n</tool_call>'))
    True
    >>> forced_tool_call_regex({"tools": [tool]}) is None  # tool_choice auto: free
    True
    """
    choice = request.get("tool_choice")
    tools = [t for t in request.get("tools") or [] if t.get("type", "function") == "function"]
    if isinstance(choice, dict) and choice.get("name"):
        tools = [t for t in tools if t.get("name") == choice["name"]]
    elif choice != "required":
        return None
    if not tools:
        return None
    calls = "|".join(_call_pattern(tool) for tool in tools)
    return rf"<tool_call>\n(?:{calls})\n</tool_call>"


def structured_output(request: dict[str, Any]) -> dict[str, Any] | None:
    """The constraint a request puts on the model's text, as a model server's structured outputs take it.

    `{"regex": ...}` for a forced tool call (`forced_tool_call_regex`), else the request's own
    `structured_outputs` (`{"regex": ...}` or `{"json": schema}`: what a harness's gateway session sets for
    a model that cannot answer yet, `gym_serve.rollout.harness_config`), else `{"json": schema}` for the
    Responses API's `text.format` of type `json_schema` (`json_object`: any object), else None.

    >>> structured_output({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}})
    {'json': {'type': 'object'}}
    >>> structured_output({"input": "hi"}) is None
    True
    """
    regex = forced_tool_call_regex(request)
    if regex is not None:
        return {"regex": regex}
    given = request.get("structured_outputs")
    if isinstance(given, dict) and given:
        return dict(given)
    text = request.get("text")
    wanted = text.get("format") if isinstance(text, dict) else None
    if isinstance(wanted, dict) and wanted.get("type") == "json_schema" and isinstance(wanted.get("schema"), dict):
        return {"json": wanted["schema"]}
    if isinstance(wanted, dict) and wanted.get("type") == "json_object":
        return {"json": {"type": "object"}}
    return None


_VALUE = {
    "string": r'"[A-Za-z][A-Za-z ]{0,11}"',
    "integer": r"-?[1-9][0-9]{0,2}",
    "number": r"-?[0-9]{1,3}\.[0-9]",
    "boolean": "(?:true|false)",
}


def _call_pattern(tool: dict[str, Any]) -> str:
    """The text of one call of `tool` with every required argument, values shaped by their JSON type."""
    schema = tool.get("parameters") or {}
    properties = schema.get("properties") or {}
    args = [
        rf'"{re.escape(name)}": {_VALUE.get(properties[name].get("type"), _VALUE["string"])}'
        for name in schema.get("required", [])
        if name in properties
    ]
    name = json.dumps(tool["name"])
    return rf'\{{"name": {re.escape(name)}, "arguments": \{{{", ".join(args)}\}}\}}'


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"
