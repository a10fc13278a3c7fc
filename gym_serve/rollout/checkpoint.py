"""A rollout's progress at a turn boundary: what a retried attempt, a resumed collection or a trainer continues.

A *turn* is one model call and what follows it (its tool calls, or the environment's user turn). After every
completed turn the episode loop (`gym_serve.rollout.loop`) reports a `turn record`: the turn's new items (the
model's output with its token bundle and policy-version spans, the tool outputs), the environment's state
after it, the sandbox snapshot id when the environment takes one, and the call's usage. A `Checkpoint` is
those records folded together: every item so far, the last state, and where each turn ended. The loop runs on
a checkpoint too, so an attempt that starts from one goes on exactly where the last one stopped: the same
items (token ids contiguous, log-probs as sampled), the same state, the next turn.

Who keeps the records: the dispatcher, in memory, for every rollout it runs (`gym_serve.collect.dispatch`),
and a file collection also in its journal (`gym_serve.collect.journal`), so a collection killed outright
resumes its unfinished rollouts mid-way.

A rollout a trainer stops at a turn boundary comes back as a *partial*: the input row, `partial: true`, its
`response.output` so far (tokens and versions) and `_gs_checkpoint` (state, turn boundaries, the application
and policy it ran on, and a digest of its token history). `partial_row` writes one; `continued` reads one
back, refusing, with the field named, a partial whose history was altered (`PartialRefused`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from gym_serve.errors import InputError
from gym_serve.wire.tokens import POLICY_VERSION, POLICY_VERSION_SPANS, TOKEN_FIELDS, policy_version_range

__all__ = [
    "CHECKPOINT",
    "PAUSED",
    "RUN",
    "Checkpoint",
    "Paused",
    "PartialRefused",
    "continued",
    "digest",
    "partial_row",
    "segments",
]

RUN = "_gs_run"
"""The field of a row sent to an Agent that carries the dispatcher's instructions for this attempt: the
checkpoint to resume from, whether to report turns, and the keys that stop it (`gym_serve.collect.dispatch`)."""
PAUSED = "_gs_paused"
"""The field of an Agent's answer for a rollout it stopped at a turn boundary: the turn it stopped after."""
CHECKPOINT = "_gs_checkpoint"
"""The field of a partial row holding what the rollout needs to go on (besides its `response.output`)."""

PARTIAL_FIELDS = (
    "partial",
    "response",
    CHECKPOINT,
    "mask_sample",
    "policy_version_min",
    "policy_version_max",
    "segments",
    "resumed_at_turn",
    "attempts",
)
"""What a partial adds to its input row (taken off again when it is continued)."""

_HISTORY_FIELDS = (*TOKEN_FIELDS, POLICY_VERSION, POLICY_VERSION_SPANS)


class Paused(Exception):
    """Raised by the episode loop when it is told to stop at a turn boundary; `turn` completed turns are kept."""

    def __init__(self, turn: int) -> None:
        super().__init__(f"paused after turn {turn}")
        self.turn = turn


class PartialRefused(InputError):
    """Raised when a partial cannot be continued: altered, incomplete, or sent to another application or policy."""


@dataclass
class Checkpoint:
    """The progress of a rollout after `turn` completed turns (0: nothing done yet, not even `reset`)."""

    turn: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    """The episode's output items so far (model outputs with their token bundles, tool outputs, user turns)."""
    turn_ends: list[int] = field(default_factory=list)
    """How many items there were at the end of each turn."""
    state: Any = None
    sandbox: str | None = None
    """The environment's snapshot of what the tools changed outside the state (a sandbox's), when it takes one."""
    step_rewards: list[float] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    response: dict[str, Any] = field(default_factory=dict)
    """The last model response's own fields (id, status, model, ...), without its output and usage."""
    ended: bool = False
    """The episode's turns are over (the model answered, or the environment ended it): verify is next."""
    terminated: bool = False
    segments: list[int] = field(default_factory=lambda: [0])
    """The turn each segment starts at: a segment is what one run made between a pause and a continue."""
    opening: str | None = None
    """The environment's reset observation that opened the conversation (a Gymnasium-style environment's), which
    a resumed episode's requests carry again; turn 1's record carries it."""

    def extend(self, record: dict[str, Any]) -> None:
        """Fold in the record of the next turn (`turn` + 1); a record of turn 1 starts the rollout over."""
        number = int(record["turn"])
        if number == 1 and self.turn != 0:  # an attempt that started from scratch (its environment is not replay-safe)
            self.__dict__.update(Checkpoint().__dict__)
        if number != self.turn + 1:
            raise ValueError(f"turn {number} does not follow turn {self.turn}")
        self.turn = number
        if number == 1:
            self.opening = record.get("opening")
        self.items.extend(record["items"])
        self.turn_ends.append(len(self.items))
        self.state = record.get("state")
        self.sandbox = record.get("sandbox")
        if record.get("step_reward") is not None:
            self.step_rewards.append(float(record["step_reward"]))
        for key, value in (record.get("usage") or {}).items():
            self.usage[key] = self.usage.get(key, 0) + int(value)
        self.response = record.get("response") or {}
        self.ended = bool(record.get("ended"))
        self.terminated = bool(record.get("terminated"))

    def to_wire(self) -> dict[str, Any]:
        """As plain data, for a row sent to an Agent (an attempt resuming here)."""
        return {
            "turn": self.turn,
            "items": self.items,
            "turn_ends": self.turn_ends,
            "state": self.state,
            "sandbox": self.sandbox,
            "step_rewards": self.step_rewards,
            "usage": self.usage,
            "response": self.response,
            "ended": self.ended,
            "terminated": self.terminated,
            "segments": self.segments,
            "opening": self.opening,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(
            turn=int(data["turn"]),
            items=list(data["items"]),
            turn_ends=[int(end) for end in data["turn_ends"]],
            state=data.get("state"),
            sandbox=data.get("sandbox"),
            step_rewards=[float(r) for r in data.get("step_rewards") or []],
            usage={k: int(v) for k, v in (data.get("usage") or {}).items()},
            response=dict(data.get("response") or {}),
            ended=bool(data.get("ended")),
            terminated=bool(data.get("terminated")),
            segments=[int(s) for s in data.get("segments") or [0]],
            opening=data.get("opening"),
        )

    def copy(self) -> Checkpoint:
        return Checkpoint.from_wire(orjson.loads(orjson.dumps(self.to_wire())))


def digest(value: Any) -> str:
    """A short, stable digest of JSON-like data (keys sorted).

    >>> digest([1, 2, 3]) == digest([1, 2, 3]) != digest([1, 2, 4])
    True
    """
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _history(items: list[dict[str, Any]], state: Any, opening: Any) -> Iterator[tuple[str, Any]]:
    """(field, value) of everything a partial's digest covers: each model call's tokens, log-probs and versions,
    the items as a whole, the state, and the reset observation that opened the prompt (where there is one)."""
    for index, item in enumerate(items):
        for name in _HISTORY_FIELDS:
            if name in item:
                yield f"response.output.{index}.{name}", item[name]
    yield "response.output", items
    yield f"{CHECKPOINT}.state", state
    if opening is not None:
        yield f"{CHECKPOINT}.opening", opening


def partial_row(row: dict[str, Any], checkpoint: Checkpoint, *, agent: str, policy: str) -> dict[str, Any]:
    """The row a rollout stopped at a turn boundary comes back as (see the module docstring).

    It is `mask_sample: true`: a trainer that does not know partials never trains on an unfinished episode.
    """
    items = checkpoint.items
    kept = {
        "turn_ends": checkpoint.turn_ends,
        "state": checkpoint.state,
        "sandbox": checkpoint.sandbox,
        "step_rewards": checkpoint.step_rewards,
        "response": checkpoint.response,
        "ended": checkpoint.ended,
        "terminated": checkpoint.terminated,
        "segments": checkpoint.segments,
        "opening": checkpoint.opening,
        "agent": agent,
        "policy": policy,
        "digest": {name: digest(value) for name, value in _history(items, checkpoint.state, checkpoint.opening)},
    }
    partial = {
        **{k: v for k, v in row.items() if k not in PARTIAL_FIELDS},
        "partial": True,
        "turns": checkpoint.turn,
        "response": {"output": items, "usage": checkpoint.usage},
        CHECKPOINT: kept,
        "mask_sample": True,
    }
    versions = policy_version_range(items)
    if versions is not None:
        partial["policy_version_min"], partial["policy_version_max"] = versions
    return partial


def continued(partial: Any, *, line: int, source: str) -> tuple[str, str, dict[str, Any], Checkpoint]:
    """A partial row, read back: (its agent, its policy, its input row, the checkpoint to go on from).

    Raises `PartialRefused` naming the field when it is not a partial gym-serve wrote or its history changed.
    """

    def refuse(field_name: str, message: str) -> PartialRefused:
        return PartialRefused(message, source=source, line=line, field=field_name)

    if not isinstance(partial, dict) or partial.get("partial") is not True:
        raise refuse("partial", "not a partial rollout (a row gym-serve returned with `partial: true`)")
    kept = partial.get(CHECKPOINT)
    output = (partial.get("response") or {}).get("output") if isinstance(partial.get("response"), dict) else None
    if not isinstance(kept, dict) or not isinstance(kept.get("digest"), dict):
        raise refuse(CHECKPOINT, "missing or not an object with its `digest`")
    if not isinstance(output, list):
        raise refuse("response.output", "missing: a partial carries its items so far")
    recorded: dict[str, Any] = kept["digest"]
    found = dict(_history(output, kept.get("state"), kept.get("opening")))
    for name in [*recorded, *found]:  # a model call's fields before the items as a whole: the precise message
        if (name in recorded) != (name in found):
            raise refuse(name, "added or removed since the rollout was paused (its digest does not match)")
        if digest(found[name]) != recorded[name]:
            raise refuse(name, "altered since the rollout was paused (its digest does not match)")
    for name in ("agent", "policy"):
        if not isinstance(kept.get(name), str):
            raise refuse(f"{CHECKPOINT}.{name}", "missing")
    turn_ends = kept.get("turn_ends") or []
    checkpoint = Checkpoint.from_wire(
        {
            **kept,
            "turn": len(turn_ends),
            "items": output,
            "usage": (partial.get("response") or {}).get("usage") or {},
        }
    )
    if turn_ends and turn_ends[-1] != len(output):
        raise refuse(f"{CHECKPOINT}.turn_ends", f"ends at item {turn_ends[-1]}, the output has {len(output)}")
    row = {k: v for k, v in partial.items() if k not in (*PARTIAL_FIELDS, "turns")}
    return kept["agent"], kept["policy"], row, checkpoint


def segments(items: list[dict[str, Any]], turn_ends: list[int], starts: list[int]) -> list[dict[str, Any]]:
    """Each segment of a continued rollout: its turns `[start, end)` and the policy versions that sampled them.

    >>> call = lambda v: {"generation_token_ids": [1], POLICY_VERSION: v, POLICY_VERSION_SPANS: [[v, 0, 1]]}
    >>> for segment in segments([call(3), {"type": "function_call_output"}, call(5)], [2, 3], [0, 1]):
    ...     print(segment)
    {'turns': [0, 1], 'policy_version_min': 3, 'policy_version_max': 3}
    {'turns': [1, 2], 'policy_version_min': 5, 'policy_version_max': 5}
    """
    found = []
    bounds = [*starts, len(turn_ends)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        first = turn_ends[start - 1] if start > 0 else 0
        last = turn_ends[end - 1] if end > 0 else 0
        segment: dict[str, Any] = {"turns": [start, end]}
        versions = policy_version_range(items[first:last])
        if versions is not None:
            segment["policy_version_min"], segment["policy_version_max"] = versions
        found.append(segment)
    return found
