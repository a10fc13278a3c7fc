"""A rollout row as people read it: blocks of text per message, tool call and output, grouped into turns.

Every text is cut at a limit (`Text`), with the length of the whole and the
address that serves the whole as plain text, so a 20 MB tool output or a
10,000-turn episode makes a page of the same size as a short one; the rollout
page shows its turns a page at a time.

Each block's `kind` picks how the page draws it. An item of a type this module
does not know (a harness gateway's segment, a sandbox command, once those
exist) is an `other` block showing its JSON: nothing in a row goes unseen, and
a later renderer for it is one more entry in `_ITEM_TEXT`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gym_serve.wire.tokens import POLICY_VERSION, POLICY_VERSION_SPANS
from gym_serve.wire.turns import Turn, content_text, split_turns

__all__ = ["Block", "Text", "TurnView", "diff", "input_blocks", "item_text", "turn_views"]


@dataclass
class Text:
    """A text as a page shows it: the first `limit` characters, how long the whole is, and where the whole is."""

    shown: str
    total: int
    url: str | None = None

    @classmethod
    def of(cls, text: str, limit: int, url: str | None = None) -> Text:
        return cls(shown=text[:limit], total=len(text), url=url if len(text) > limit else None)

    @property
    def cut(self) -> bool:
        return len(self.shown) < self.total


@dataclass
class Block:
    kind: str
    """system, user, assistant, reasoning, tool_call, tool_output, copied (earlier context), other."""
    title: str
    text: Text
    note: str = ""


@dataclass
class TurnView:
    number: int
    blocks: list[Block]
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    policy: str = ""
    hollow: bool = False
    cut: bool = False
    notes: list[str] = field(default_factory=list)


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False)


def _arguments_text(item: dict[str, Any]) -> str:
    arguments = item.get("arguments")
    if isinstance(arguments, str) and len(arguments) < 100_000:
        try:
            return json.dumps(json.loads(arguments), indent=1, ensure_ascii=False)
        except ValueError:
            return arguments
    return arguments if isinstance(arguments, str) else _json_text(arguments)


def _output_text(item: dict[str, Any]) -> str:
    output = item.get("output")
    return output if isinstance(output, str) else content_text(output) or _json_text(output)


_ITEM_TEXT: dict[str, Callable[[dict[str, Any]], str]] = {
    "message": lambda item: content_text(item.get("content")),
    "reasoning": lambda item: content_text(item.get("summary")) + content_text(item.get("content")),
    "function_call": _arguments_text,
    "function_call_output": _output_text,
}


def item_text(item: dict[str, Any]) -> str:
    """The whole text of an item, as its block shows it (an unknown item: its JSON)."""
    reader = _ITEM_TEXT.get(str(item.get("type", "message")))
    return reader(item) if reader is not None else _json_text(item)


def _block(item: dict[str, Any], limit: int, url: str) -> Block:
    kind = str(item.get("type", "message"))
    text = Text.of(item_text(item), limit, url)
    if kind == "message":
        role = str(item.get("role", "assistant"))
        return Block(role if role in ("system", "user", "assistant", "developer") else "other", role, text)
    if kind == "reasoning":
        return Block("reasoning", "reasoning", text)
    if kind == "function_call":
        return Block("tool_call", f"calls {item.get('name')}", text, note=str(item.get("call_id") or ""))
    if kind == "function_call_output":
        return Block("tool_output", "tool output", text, note=str(item.get("call_id") or ""))
    return Block("other", kind, text)


def input_blocks(row: dict[str, Any], limit: int, url: Callable[[str], str]) -> list[Block]:
    """The messages the episode started from (`responses_create_params.input`)."""
    given = (row.get("responses_create_params") or {}).get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    blocks = []
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        block = _block(item, limit, url(f"in-{n}"))
        if block.kind == "assistant":
            block.kind, block.title = "copied", "assistant (earlier context)"
        blocks.append(block)
    return blocks


def turn_views(
    row: dict[str, Any], limit: int, url: Callable[[str], str], *, first: int = 0, count: int | None = None
) -> tuple[list[TurnView], int]:
    """The turns `first` .. `first + count - 1` of the episode, and how many there are."""
    output = [item for item in (row.get("response") or {}).get("output") or [] if isinstance(item, dict)]
    positions = {id(item): n for n, item in enumerate(output)}
    turns = split_turns(output)
    shown = turns[first : None if count is None else first + count]
    return [_turn_view(turn, limit, url, positions) for turn in shown], len(turns)


def _turn_view(turn: Turn, limit: int, url: Callable[[str], str], positions: dict[int, int]) -> TurnView:
    blocks = [_block(item, limit, url(f"out-{positions[id(item)]}")) for item in (*turn.items, *turn.answers)]
    view = TurnView(number=turn.index + 1, blocks=blocks, hollow=bool(turn.items) and turn.hollow)
    bundle = turn.bundle
    if bundle is not None:
        prompt, generated = bundle.get("prompt_token_ids"), bundle.get("generation_token_ids")
        view.prompt_tokens = len(prompt) if isinstance(prompt, list) else None
        view.generated_tokens = len(generated) if isinstance(generated, list) else None
        if POLICY_VERSION in bundle:
            spans = bundle.get(POLICY_VERSION_SPANS) or []
            versions = sorted({int(span[0]) for span in spans} or {int(bundle[POLICY_VERSION])})
            view.policy = ", ".join(f"v{v}" for v in versions)
    view.cut = any(item.get("status") == "incomplete" for item in turn.items)
    return view


def _lines(row: dict[str, Any], limit: int) -> list[str]:
    output = [item for item in (row.get("response") or {}).get("output") or [] if isinstance(item, dict)]
    lines = [
        f"[reward] {row.get('reward')}" if "_ng_failure_class" not in row else f"[failed] {row['_ng_failure_class']}"
    ]
    for item in output:
        block = _block(item, limit, "")
        text = block.text.shown + (f" … ({block.text.total:,} characters)" if block.text.cut else "")
        lines += [f"[{block.title}] {line}" for line in text.splitlines() or [""]]
    return lines


def diff(
    a: dict[str, Any], b: dict[str, Any], *, limit: int = 2000, max_lines: int = 2000
) -> list[tuple[str, str, str]]:
    """Two episodes side by side, line by line: `(tag, line of a, line of b)`; tag: equal, replace, delete, insert.

    Each item's text is cut at `limit` characters and each side at `max_lines` lines, so two huge rollouts
    still compare in a moment.
    """
    left, right = _lines(a, limit)[:max_lines], _lines(b, limit)[:max_lines]
    rows: list[tuple[str, str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        span = max(i2 - i1, j2 - j1)
        for k in range(span):
            rows.append((tag, left[i1 + k] if i1 + k < i2 else "", right[j1 + k] if j1 + k < j2 else ""))
    return rows
