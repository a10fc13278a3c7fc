"""Token capture for one gateway session: which calls extend which, and the rollout's output built from them.

A harness sends its whole conversation on every call. The gateway keeps, per *segment*, the conversation in
token space: the last request it sent the Model tier for that segment and the reply it produced, whose last
item carries the call's token bundle (`gym_serve.wire.tokens`). A new request *extends* a segment when its
items are that segment's request plus reply, then new turns (compared by what the model saw: roles, texts,
function calls and their parsed arguments, tool outputs; not item ids or formatting), and its instructions
and tools are the segment's. The tier is then sent the segment's own items followed by only the new turns,
so its prompt is the previous prompt ids + the sampled ids + the new turns rendered (the tier extends a
bundle, `gym_serve.wire.chat_template`): sampled text is never re-tokenized.

A request that extends no segment (the harness compacted, truncated, edited or reordered its history,
changed its tools, or made a side call) starts a new segment. So does a call whose prompt the tier could
not extend (a template that renders history differently), and one of two calls sent at once on the same
segment (the second branches). Every segment is contiguous by construction; `check_contiguity` re-checks.

`output()` is the rollout's `response.output`: per segment, a `gateway_segment` item (why it started, its
first request's items, instructions and tools), then per call the turns that call added and the reply
items (the bundle on the last). Segments are ordered by their last call, so the rollout's final reply is the
last assistant message. With a text-only tier (no bundles) the same structure holds, without token ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from gym_serve.wire.gateway import public_items
from gym_serve.wire.hermes import structured_output
from gym_serve.wire.pieces import input_items
from gym_serve.wire.tokens import SEGMENT, segment_sequence, token_calls
from gym_serve.wire.turns import content_text

__all__ = ["Call", "Capture", "Prepared", "Segment", "calls_of", "canonical"]


def canonical(item: dict[str, Any]) -> tuple[Any, ...] | None:
    """What the model saw of an item, for comparing conversations; None for an empty assistant message.

    >>> canonical({"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"b": 1, "a": 2}'})
    ('function_call', 'c1', 'f', '{"a": 2, "b": 1}')
    >>> canonical({"role": "assistant", "content": [{"type": "output_text", "text": ""}]}) is None
    True
    """
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role", "user")
        text = content_text(item.get("content"))
        if role == "assistant" and not text:
            return None
        return ("message", "system" if role == "developer" else role, text)
    if kind == "function_call":
        return ("function_call", item.get("call_id", ""), item.get("name", ""), _arguments(item.get("arguments")))
    if kind == "function_call_output":
        return ("function_call_output", item.get("call_id", ""), content_text(item.get("output")))
    if kind == "reasoning":
        text = content_text(item.get("summary")) + content_text(item.get("content"))
        return ("reasoning", text.strip())
    return (kind, json.dumps(item, sort_keys=True))


def _arguments(arguments: Any) -> str:
    if not isinstance(arguments, str):
        return json.dumps(arguments, sort_keys=True)
    try:  # the standard library's parser: it keeps integers over 64 bits exact, orjson's makes them floats
        return json.dumps(json.loads(arguments), sort_keys=True)
    except json.JSONDecodeError:
        return arguments.strip()


def _sorted_json(value: Any) -> str:
    """`value` as JSON, keys sorted, for comparing (orjson: this runs on every call; `value` is what orjson read)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:  # what orjson cannot write (an integer over 64 bits)
        return json.dumps(value, sort_keys=True)


def _canonical_items(items: list[dict[str, Any]]) -> list[tuple[tuple[Any, ...], int]]:
    """(canonical form, index) of every item that is not an empty assistant message."""
    return [(form, i) for i, item in enumerate(items) if (form := canonical(item)) is not None]


def _context(request: dict[str, Any]) -> str:
    """The instructions and tools a call renders with: a segment's calls must share them."""
    tools = [
        [t.get("name"), t.get("description") or "", t.get("parameters") or {}] for t in request.get("tools") or []
    ]
    return _sorted_json([request.get("instructions") or "", tools])


@dataclass
class Call:
    """One model call of the session, as the rollout row lists it (`gateway.calls`)."""

    number: int
    segment: int
    api: str
    stream: bool
    new_items: int
    """Items this call added to its segment's conversation (all of them, for a segment's first call)."""
    status: str = "completed"
    constraint: dict[str, Any] | None = None
    """The structured-output constraint the call was sampled under (a forced tool call's regex, a JSON schema)."""
    prompt_tokens: int = 0
    generated_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0

    def row(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Segment:
    """Calls that each extend the one before: one training sequence."""

    index: int
    reason: str
    context: str
    first_request: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    """The rollout-output items of its calls: the turns each call added, then its reply."""
    tail: list[dict[str, Any]] = field(default_factory=list)
    """The last request's items and its reply, as the tier got and gave them (the reply's bundle last)."""
    forms: list[tuple[Any, ...]] = field(default_factory=list)
    """The canonical forms of `tail` (empty assistant messages left out)."""
    calls: list[int] = field(default_factory=list)
    version: int = 0
    """Bumped by every call, so a call prepared on an older tail knows it branched."""

    def marker(self) -> dict[str, Any]:
        request = self.first_request
        return {
            "type": SEGMENT,
            "segment": self.index,
            "reason": self.reason,
            "calls": list(self.calls),
            "input": public_items(input_items(request["input"])),
            "instructions": request.get("instructions"),
            "tools": request.get("tools") or [],
        }


@dataclass
class Prepared:
    """A request made ready for the tier: its segment (None: a new one) and the items the tier gets."""

    request: dict[str, Any]
    new_items: list[dict[str, Any]]
    segment: Segment | None
    version: int
    context: str
    reason: str
    forms: list[tuple[Any, ...]]
    """The canonical forms of the items the tier gets (kept so that `record` need not work them out again)."""


class Capture:
    """One session's calls and segments; see the module docstring."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.calls: list[Call] = []
        self.last_reply: list[dict[str, Any]] = []

    def prepare(self, request: dict[str, Any]) -> Prepared:
        """Which segment `request` extends, and the request the tier is sent (`request["input"]` as items)."""
        items = input_items(request["input"])
        indexed = _canonical_items(items)
        forms = [form for form, _ in indexed]
        context = _context(request)
        reason = "first" if not self.segments else "history_rewritten"
        for segment in reversed(self.segments):
            known = len(segment.forms)
            if not known or known > len(forms) or forms[:known] != segment.forms:
                continue
            if segment.context != context:
                reason = "tools_changed"
                continue
            start = indexed[known - 1][1] + 1
            new = items[start:]
            sent = {**request, "input": segment.tail + new}
            return Prepared(sent, new, segment, segment.version, context, "", segment.forms + forms[known:])
        return Prepared({**request, "input": items}, items, None, 0, context, reason, forms)

    def record(
        self, prepared: Prepared, response: dict[str, Any], *, api: str, stream: bool, latency_s: float
    ) -> Call:
        """Record the tier's answer to a prepared request; returns the call as the row lists it."""
        reply = list(response.get("output") or [])
        segment, reason = prepared.segment, prepared.reason
        if segment is not None and segment.version != prepared.version:
            segment, reason = None, "branched"  # another call extended this segment meanwhile
        if segment is not None and not _extends(segment.tail, reply):
            segment, reason = None, "rerendered"  # the tier rendered the history anew: its ids start afresh
        sent = input_items(prepared.request["input"])
        if segment is None:
            segment = Segment(len(self.segments), reason, prepared.context, {**prepared.request, "input": sent})
            self.segments.append(segment)
            added: list[dict[str, Any]] = []
        else:
            added = prepared.new_items
        segment.items += added + reply
        segment.tail = sent + reply
        segment.forms = prepared.forms + [form for form, _ in _canonical_items(reply)]
        segment.version += 1
        call = Call(
            number=len(self.calls) + 1,
            segment=segment.index,
            api=api,
            stream=stream,
            new_items=len(added) if segment.calls else len(sent),
            status=str(response.get("status") or "completed"),
            constraint=structured_output(prepared.request),
            latency_s=round(latency_s, 4),
            **_token_counts(reply, response),
        )
        segment.calls.append(call.number)
        self.calls.append(call)
        self.last_reply = reply
        return call

    def output(self) -> list[dict[str, Any]]:
        """The rollout's `response.output`: every segment (ordered by its last call), marker first."""
        ordered = sorted(self.segments, key=lambda s: s.calls[-1])
        return [item for segment in ordered for item in (segment.marker(), *segment.items)]

    def sequences(self) -> list[dict[str, Any]]:
        """Each token segment's training sequence (prompt, completion, loss mask, log-probs, versions), in the
        order of `output()`; empty for a text-only tier."""
        ordered = sorted(self.segments, key=lambda s: s.calls[-1])
        found = [(segment, token_calls(segment.items)) for segment in ordered]
        return [
            {"segment": segment.index, "reason": segment.reason, **segment_sequence(calls).model_dump()}
            for segment, calls in found
            if calls
        ]

    def summary(self) -> dict[str, Any]:
        """The row's `gateway` field: every call, and how many segments."""
        return {"calls": [call.row() for call in self.calls], "segments": len(self.segments)}


def _extends(tail: list[dict[str, Any]], reply: list[dict[str, Any]]) -> bool:
    """Does the new call's prompt extend the segment's last prompt + generation (when the tier gives ids)?"""
    before, after = token_calls(tail), token_calls(reply)
    if not before or not after:
        return True  # a text-only tier: the conversation, compared above, is all there is
    sequence = before[-1]["prompt_token_ids"] + before[-1]["generation_token_ids"]
    return after[-1]["prompt_token_ids"][: len(sequence)] == sequence


def _token_counts(reply: list[dict[str, Any]], response: dict[str, Any]) -> dict[str, int]:
    usage = response.get("usage") or {}
    bundles = token_calls(reply)
    if bundles:
        bundle = bundles[-1]
        prompt, generated = len(bundle["prompt_token_ids"]), len(bundle["generation_token_ids"])
    else:
        prompt, generated = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    return {"prompt_tokens": prompt, "generated_tokens": generated, "cached_tokens": cached}


def calls_of(rollout: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """A harness rollout row's calls in call order, each with its token bundle (None from a text-only tier).

    The output holds the bundles segment by segment; each segment's marker lists its calls, in order.
    """
    calls = {call["number"]: call for call in (rollout.get("gateway") or {}).get("calls", [])}
    bundles: dict[int, dict[str, Any]] = {}
    numbers: list[int] = []
    for item in (rollout.get("response") or {}).get("output") or []:
        if item.get("type") == SEGMENT:
            numbers = list(item.get("calls") or [])
        elif "generation_token_ids" in item and numbers:
            bundles[numbers.pop(0)] = item
    return [(calls[number], bundles.get(number)) for number in sorted(calls)]
