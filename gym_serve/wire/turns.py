"""A rollout's `response.output` read as turns: what each model call produced, then what answered it.

The agent loop appends, for every model call, the items the model produced
(reasoning, an assistant message, function calls) and then what answered them
(the tools' `function_call_output`s, or an environment's user message). A
token-returning model tier marks where a call ends: its token bundle sits on
the call's last item (`gym_serve.wire.tokens`). Without bundles a call ends
where the answers to it begin. The health checks, the ATIF export and the
viewer all read turns this one way.

An item of a type this module does not know (a harness gateway's segment, a
sandbox command, once those exist) is a model item unless it is an answer
type: it stays in its turn, in order, for a reader that knows it.

>>> output = [
...     {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look it up"}]},
...     {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
...     {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
...     {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
... ]
>>> [(t.reasoning, [c["name"] for c in t.calls], t.text, len(t.answers)) for t in split_turns(output)]
[('look it up', ['get_weather'], '', 1), ('', [], 'Sunny.', 0)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANSWER_TYPES", "Turn", "content_text", "is_answer", "split_turns"]

ANSWER_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "computer_call_output"})
"""Item types that answer a model call rather than come from one."""


@dataclass
class Turn:
    """One model call's items (`items`, in order) and what answered them (`answers`)."""

    index: int
    """0-based position among the rollout's turns."""
    start: int
    """Position of the turn's first item in `response.output`."""
    items: list[dict[str, Any]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bundle(self) -> dict[str, Any] | None:
        """The item carrying the call's token bundle, if the tier gave one."""
        return next((item for item in self.items if "generation_token_ids" in item), None)

    @property
    def text(self) -> str:
        """The assistant message text of the turn."""
        return "".join(
            content_text(item.get("content")) for item in self.items if item.get("type", "message") == "message"
        )

    @property
    def reasoning(self) -> str:
        return "".join(
            content_text(item.get("summary")) + content_text(item.get("content"))
            for item in self.items
            if item.get("type") == "reasoning"
        )

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [item for item in self.items if item.get("type") == "function_call"]

    @property
    def hollow(self) -> bool:
        """No text, no reasoning, no function call: the call produced nothing anyone can read."""
        return not (self.text.strip() or self.reasoning.strip() or self.calls)


def is_answer(item: dict[str, Any]) -> bool:
    """Is `item` an answer to a model call (a tool output, or a user/system message the environment added)?"""
    kind = item.get("type", "message")
    return kind in ANSWER_TYPES or (kind == "message" and item.get("role", "assistant") != "assistant")


def split_turns(output: list[dict[str, Any]]) -> list[Turn]:
    """The turns of a rollout's output items; answers before any model item form a turn without items."""
    turns: list[Turn] = []
    closed = True  # the next model item starts a new turn
    for position, item in enumerate(output):
        if not isinstance(item, dict):
            continue
        if is_answer(item):
            if not turns:
                turns.append(Turn(index=0, start=position))
            turns[-1].answers.append(item)
            closed = True
            continue
        if closed:
            turns.append(Turn(index=len(turns), start=position))
            closed = False
        turns[-1].items.append(item)
        if "generation_token_ids" in item:
            closed = True
    return turns


def content_text(content: Any) -> str:
    """The text of a message's `content` (a string, or parts with `text`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""
