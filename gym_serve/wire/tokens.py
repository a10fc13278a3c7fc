"""The training-token contract: each model call's token ids, and the contiguity invariant across calls.

The last output item of every model call carries `prompt_token_ids`,
`generation_token_ids` and `generation_log_probs` (NeMo Gym's "ForTraining"
items). For on-policy training the ids must be exactly what the policy saw
and sampled, so across the calls of one rollout the running sequence
`prompt + generation` of a call must be a prefix of the next call's prompt —
the check NeMo RL makes ("Non-contiguous messages found!"). A model tier that
re-renders and re-tokenizes history breaks it; ours extends the sequence.

A model tier whose weights change (the vLLM tier) also says which policy
version sampled the tokens: `policy_version` (an integer that only increases)
and `policy_version_spans`, `[[version, start, end], ...]` over the generated
tokens, of which there is more than one when an update landed during the call.

A harness agent may rewrite its history (compact it, drop a turn): its next
call then does not extend the previous one, and the gateway starts a new
*segment* there. A rollout's output marks each segment's start with a
`gateway_segment` item (`SEGMENT`); contiguity holds within each segment, and
each segment is one training sequence (`segment_sequence`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel

from gym_serve.wire.pieces import usage

__all__ = [
    "POLICY_VERSION",
    "POLICY_VERSION_SPANS",
    "SEGMENT",
    "TOKEN_FIELDS",
    "ContiguityReport",
    "SegmentSequence",
    "check_contiguity",
    "policy_version_range",
    "segment_sequence",
    "segments_of",
    "token_calls",
    "token_response",
]

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
POLICY_VERSION = "policy_version"
"""On a token bundle: the policy version that sampled the call's first token (its oldest)."""
POLICY_VERSION_SPANS = "policy_version_spans"
"""On a token bundle: `[[version, start, end], ...]`: generated tokens `start` to `end - 1` came from `version`."""
SEGMENT = "gateway_segment"
"""The type of the output item that starts a segment of a harness rollout (its calls, why it started)."""


class ContiguityReport(BaseModel):
    """What `check_contiguity` found: `ok` only if every call extends the one before it."""

    calls: int
    ok: bool
    problems: list[str]
    breaks: list[int] = []
    """The calls (numbered from 1) whose prompt does not extend the previous call's prompt + generation."""
    segments: int = 1
    """Segments checked (a harness rollout whose history was rewritten has several; each must be contiguous)."""


def token_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items that carry a model call's token bundle, in order."""
    return [item for item in items if "generation_token_ids" in item]


def segments_of(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A rollout's output items cut at its `gateway_segment` items: one list per segment (markers kept first).

    >>> marker = {"type": SEGMENT, "segment": 1}
    >>> [len(part) for part in segments_of([{"type": "message"}, marker, {"type": "message"}])]
    [1, 2]
    """
    parts: list[list[dict[str, Any]]] = [[]]
    for item in items:
        if item.get("type") == SEGMENT and parts[-1]:
            parts.append([])
        parts[-1].append(item)
    return parts


def check_contiguity(rollout: dict[str, Any]) -> ContiguityReport:
    """Check every model call of a rollout row (or of a Responses object) against the contract, per segment.

    >>> first = {"prompt_token_ids": [1, 2], "generation_token_ids": [3], "generation_log_probs": [-0.1]}
    >>> second = {"prompt_token_ids": [1, 2, 3, 4], "generation_token_ids": [5], "generation_log_probs": [-0.2]}
    >>> check_contiguity({"output": [first, second]}).ok
    True
    >>> second["prompt_token_ids"] = [1, 2, 9, 4]  # history re-tokenized differently
    >>> check_contiguity({"output": [first, second]}).problems
    ['call 2: prompt does not extend the previous prompt + generation (first difference at token 2 of 3)']
    >>> report = check_contiguity({"output": [first, {"type": SEGMENT, "segment": 1}, second]})
    >>> report.ok, report.segments  # a new segment starts afresh
    (True, 2)
    """
    response = rollout.get("response", rollout)
    problems: list[str] = []
    breaks: list[int] = []
    number = 0
    parts = segments_of(response.get("output", []))
    for part in parts:
        sequence: list[int] | None = None
        for item in token_calls(part):
            number += 1
            missing = [field for field in TOKEN_FIELDS if not isinstance(item.get(field), list)]
            if missing:
                problems.append(f"call {number}: incomplete token bundle, missing {', '.join(missing)}")
                continue
            prompt, generation, logprobs = (item[field] for field in TOKEN_FIELDS)
            if len(generation) != len(logprobs):
                problems.append(f"call {number}: {len(generation)} generated tokens but {len(logprobs)} log-probs")
            if not generation:
                problems.append(f"call {number}: empty generation")
            if sequence is not None and prompt[: len(sequence)] != sequence:
                common = min(len(prompt), len(sequence))
                at = next((i for i in range(common) if prompt[i] != sequence[i]), common)
                breaks.append(number)
                problems.append(
                    f"call {number}: prompt does not extend the previous prompt + generation "
                    f"(first difference at token {at} of {len(sequence)})"
                )
            sequence = prompt + generation
    return ContiguityReport(
        calls=number,
        ok=not problems and bool(number),
        problems=problems or ([] if number else ["no model call carries token ids"]),
        breaks=breaks,
        segments=len(parts),
    )


class SegmentSequence(BaseModel):
    """One segment's calls as one token sequence: what a trainer trains on (see `segment_sequence`)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    """1 exactly where a call's generation sits in the completion (tool outputs, user turns, markup: 0)."""
    logprobs: list[float]
    """The sampler's log-prob where the mask is 1, else 0.0."""
    calls: int
    policy_version_min: int | None = None
    """The oldest policy version among the calls' bundles; None unless every call says."""
    policy_version_max: int | None = None


def segment_sequence(calls: list[dict[str, Any]]) -> SegmentSequence:
    """The training sequence of contiguous calls (`check_contiguity` holds): the first prompt, then everything after.

    >>> call = lambda p, g: {"prompt_token_ids": p, "generation_token_ids": g, "generation_log_probs": [-0.5] * len(g)}
    >>> s = segment_sequence([call([1, 2], [3]), call([1, 2, 3, 4, 5], [6, 7])])
    >>> s.prompt_ids, s.completion_ids, s.loss_mask
    ([1, 2], [3, 4, 5, 6, 7], [1, 0, 0, 1, 1])
    """
    start = len(calls[0]["prompt_token_ids"])
    episode = [*calls[-1]["prompt_token_ids"], *calls[-1]["generation_token_ids"]]
    mask = [0] * len(episode)
    logprobs = [0.0] * len(episode)
    for call in calls:
        offset = len(call["prompt_token_ids"])
        for k, logprob in enumerate(call["generation_log_probs"]):
            mask[offset + k] = 1
            logprobs[offset + k] = float(logprob)
    versions = [call[POLICY_VERSION] for call in calls if isinstance(call.get(POLICY_VERSION), int)]
    known = len(versions) == len(calls)
    return SegmentSequence(
        prompt_ids=episode[:start],
        completion_ids=episode[start:],
        loss_mask=mask[start:],
        logprobs=logprobs[start:],
        calls=len(calls),
        policy_version_min=min(versions) if known else None,
        policy_version_max=max(versions) if known else None,
    )


def token_response(
    model: str,
    output: list[dict[str, Any]],
    prompt_ids: list[int],
    generated: list[int],
    logprobs: list[float],
    finish_reason: str | None,
    cached_tokens: int = 0,
    **bundle_extra: Any,
) -> dict[str, Any]:
    """A token-returning model call as a Responses object: the token bundle (and `bundle_extra`) on its last item.

    `cached_tokens`: the prompt tokens the engine's prefix cache held (`usage.input_tokens_details`).

    A call that produced no item (an empty or cut-off generation) gets an empty
    assistant message to carry the bundle; a call stopped by its length limit is
    `incomplete`, as the Responses API says.

    >>> r = token_response("m", [], [1, 2], [3], [-0.5], "length")
    >>> r["status"], r["output"][-1]["generation_token_ids"], r["usage"]["total_tokens"]
    ('incomplete', [3], 3)
    """
    if not output:  # the token bundle needs an item to live on
        output = [
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:16]}",
                "role": "assistant",
                "status": "incomplete",
                "content": [{"type": "output_text", "text": "", "annotations": []}],
            }
        ]
    output[-1].update(
        prompt_token_ids=prompt_ids, generation_token_ids=generated, generation_log_probs=logprobs, **bundle_extra
    )
    response: dict[str, Any] = {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": time.time(),
        "model": model,
        "status": "completed",
        "output": output,
        "usage": usage(len(prompt_ids), len(generated), cached_tokens=cached_tokens),
    }
    if finish_reason == "length":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    return response


def policy_version_range(items: list[dict[str, Any]]) -> tuple[int, int] | None:
    """The oldest and the newest policy version that sampled a token of these model calls; None if none says.

    >>> first = {"generation_token_ids": [7, 8], POLICY_VERSION: 3, POLICY_VERSION_SPANS: [[3, 0, 2]]}
    >>> second = {"generation_token_ids": [9, 9, 9], POLICY_VERSION: 3, POLICY_VERSION_SPANS: [[3, 0, 1], [4, 1, 3]]}
    >>> policy_version_range([first, {"type": "function_call_output"}, second])
    (3, 4)
    >>> policy_version_range([{"generation_token_ids": [1]}]) is None
    True
    """
    versions: list[int] = []
    for call in token_calls(items):
        if POLICY_VERSION in call:
            spans = call.get(POLICY_VERSION_SPANS) or []
            versions.extend([int(span[0]) for span in spans] or [int(call[POLICY_VERSION])])
    return (min(versions), max(versions)) if versions else None
