"""One rollout row as one multi-turn training sequence: the building block every trainer adapter shares.

A rollout sampled by a token-exact model tier (`kind: vllm`, `kind: vllm_http`)
carries a token bundle on the last output item of every model call
(`gym_serve.wire.tokens`): the ids the policy saw (`prompt_token_ids`), the ids
it sampled (`generation_token_ids`) and their log-probs under the sampler
(`generation_log_probs`). Because each call's prompt extends the previous
call's prompt + generation, the whole episode is one token sequence:

    prompt  = the first call's prompt_token_ids                      (never trained)
    episode = the last call's prompt_token_ids + generation_token_ids
    completion = episode[len(prompt):]                                (what every trainer calls the response)
    mask[j] = 1 exactly where a call's generation sits                (tool outputs, user turns, markup: 0)
    logprobs[j] = the sampler's log-prob there, 0.0 elsewhere         (every trainer pads with 0.0)

This is how TRL, verl, SkyRL and NeMo RL all split a multi-turn episode (each
trainer's own tool loop masks what the policy did not sample), so the four
adapters in this package are thin reshapes of a `TrainingSequence`.

A harness agent's rollout may have several *segments* (the harness rewrote its
history, so a later call does not extend the earlier ones: `gateway_segment`
items in its output, `gym_serve.wire.tokens`). Each segment is one sequence of
its own, with the rollout's reward (`build_sequences`); a trainer whose hook
takes one sequence per rollout gets the final segment (`build_sequence`), the
one whose calls end the rollout.

Nothing here re-tokenizes: a rollout without token ids is an error that names
the model kinds that give them, never a silent fallback to a tokenizer (its
ids would differ from what the policy sampled, and the log-probs would be
missing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from gym_serve.errors import ConfigError, GymServeError
from gym_serve.wire.responses import output_text
from gym_serve.wire.tokens import SEGMENT, check_contiguity, segment_sequence, segments_of, token_calls

__all__ = [
    "MissingTokenIds",
    "NonContiguousRollout",
    "PromptTooLong",
    "RolloutFailed",
    "TokenizerMismatch",
    "TrainingSequence",
    "build_sequence",
    "build_sequences",
    "final_segment",
    "check_prompt_length",
    "check_tokenizer",
    "failure_class",
    "group_advantages",
    "group_sequences",
    "placeholder_sequence",
    "rollout_id",
]

TOKEN_MODEL_KINDS = "`model: {kind: vllm, ...}` (an engine in the cluster) or `{kind: vllm_http, ...}` (a vLLM server)"


class MissingTokenIds(ConfigError):
    """Raised when a finished rollout carries no token ids: its model tier cannot be trained on."""

    def __init__(self, rollout: dict[str, Any]) -> None:
        super().__init__(
            f"rollout {rollout_id(rollout)} carries no token ids (`prompt_token_ids` / `generation_token_ids` / "
            f"`generation_log_probs` on its model calls), so it cannot be trained on: its model tier gives text only "
            f"(e.g. `kind: openai` or `kind: replay`). Sample with {TOKEN_MODEL_KINDS}; gym-serve never "
            f"re-tokenizes text for a trainer.",
            key="model.kind",
        )


class NonContiguousRollout(GymServeError):
    """Raised when a rollout's token ids break the contract: each model call must extend the one before it."""

    def __init__(self, rollout: dict[str, Any], problems: list[str]) -> None:
        super().__init__(f"rollout {rollout_id(rollout)}: Non-contiguous messages found! {'; '.join(problems)}")
        self.problems = problems


class TokenizerMismatch(ConfigError):
    """Raised when the trainer's tokenizer reads the sampled ids as other text than the model tier wrote."""


class PromptTooLong(ConfigError):
    """Raised when a rollout's prompt alone is longer than the trainer takes (it would be cut, losing the task)."""


class RolloutFailed(GymServeError):
    """Raised by the adapters whose trainer takes no failed rollout (verl, NeMo RL): the trainer re-requests."""

    def __init__(self, rollout: dict[str, Any]) -> None:
        super().__init__(
            f"rollout {rollout_id(rollout)} failed ({failure_class(rollout)}) after {rollout.get('attempts')} "
            f"attempt(s): {rollout.get('error')}"
        )
        self.rollout = rollout


class TrainingSequence(BaseModel):
    """One rollout as a trainer sees it: the prompt, the completion, which completion tokens to train, the sampler."""

    prompt_ids: list[int] = Field(description="The first model call's prompt: the chat-templated task.")
    completion_ids: list[int] = Field(description="Everything after the prompt: every turn, tool output, user turn.")
    completion_mask: list[int] = Field(description="1 where the policy sampled the token (trained), else 0.")
    completion_logprobs: list[float] = Field(description="The sampler's log-prob where the mask is 1, else 0.0.")
    reward: float | None = Field(description="The environment's reward; None when the rollout must not be scored.")
    trainable: bool = Field(description="False for a failed or `mask_sample` rollout: its mask is all 0.")
    task_index: Any = None
    rollout_index: Any = None
    calls: int = Field(default=0, description="Model calls in the episode.")
    policy_version_min: int | None = Field(
        default=None, description="The oldest policy version among the calls' bundles; None if the tier gives none."
    )
    policy_version_max: int | None = None
    failure: str | None = Field(default=None, description="The failure row's `_ng_failure_class`, if it failed.")
    segment: int = Field(
        default=0, description="Which segment of the rollout this is (a harness rollout may have several)."
    )
    segments: int = Field(default=1, description="How many segments the rollout has.")

    @property
    def token_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.completion_ids]

    @property
    def model_tokens(self) -> int:
        return sum(self.completion_mask)


def rollout_id(rollout: dict[str, Any]) -> str:
    """How errors name a rollout: `(task 3, rollout 1)`."""
    return f"(task {rollout.get('_ng_task_index')}, rollout {rollout.get('_ng_rollout_index')})"


def failure_class(rollout: dict[str, Any]) -> str | None:
    """The failure kind of a failure row (the driver's and the ingress's shape), or None for a finished rollout."""
    kind = rollout.get("_ng_failure_class")
    return None if kind is None else str(kind)


def build_sequences(rollout: dict[str, Any]) -> list[TrainingSequence]:
    """One training sequence per segment of a finished rollout row, after checking its token contract.

    A rollout of gym-serve's own tool loop has one segment; a harness rollout whose history was rewritten has
    several, each with the rollout's reward. A `mask_sample` rollout (its verifier said not to train on it)
    keeps its tokens with an all-zero mask and no reward. A failure row has no episode: it raises
    `RolloutFailed` here; `group_sequences` masks it instead, for the trainers that want one row per rollout.

    >>> call = lambda p, g: {"prompt_token_ids": p, "generation_token_ids": g, "generation_log_probs": [-0.5] * len(g)}
    >>> row = {"reward": 1.0, "response": {"output": [call([1, 2], [3]), {"type": "function_call_output"},
    ...                                               call([1, 2, 3, 4, 5], [6, 7])]}}
    >>> (s,) = build_sequences(row)
    >>> s.prompt_ids, s.completion_ids, s.completion_mask
    ([1, 2], [3, 4, 5, 6, 7], [1, 0, 0, 1, 1])
    >>> s.completion_logprobs
    [-0.5, 0.0, 0.0, -0.5, -0.5]
    >>> row["response"]["output"].append({"type": "gateway_segment", "segment": 1})  # the history was rewritten
    >>> row["response"]["output"].append(call([8, 9], [4]))
    >>> [(s.segment, s.prompt_ids, s.completion_ids, s.reward) for s in build_sequences(row)][1]
    (1, [8, 9], [4], 1.0)
    """
    if failure_class(rollout) is not None:
        raise RolloutFailed(rollout)
    output = (rollout.get("response") or {}).get("output") or []
    if not token_calls(output):
        raise MissingTokenIds(rollout)
    report = check_contiguity(rollout)
    if not report.ok:
        raise NonContiguousRollout(rollout, report.problems)
    parts = [calls for calls in (token_calls(part) for part in segments_of(output)) if calls]
    trainable = not rollout.get("mask_sample", False)
    sequences = []
    for index, calls in enumerate(parts):
        s = segment_sequence(calls)
        sequences.append(
            TrainingSequence(
                prompt_ids=s.prompt_ids,
                completion_ids=s.completion_ids,
                completion_mask=s.loss_mask if trainable else [0] * len(s.loss_mask),
                completion_logprobs=s.logprobs,
                reward=float(rollout["reward"]) if trainable else None,
                trainable=trainable,
                task_index=rollout.get("_ng_task_index"),
                rollout_index=rollout.get("_ng_rollout_index"),
                calls=s.calls,
                policy_version_min=s.policy_version_min,
                policy_version_max=s.policy_version_max,
                segment=index,
                segments=len(parts),
            )
        )
    return sequences


def build_sequence(rollout: dict[str, Any]) -> TrainingSequence:
    """The training sequence of a finished rollout row: for a harness rollout of several segments, the final one.

    For the trainers whose hook takes exactly one sequence per rollout (TRL's `rollout_func`, verl's agent
    loop); `build_sequences` gives every segment.
    """
    return build_sequences(rollout)[-1]


def final_segment(rollout: dict[str, Any]) -> dict[str, Any]:
    """The rollout row with only its final segment's items in `response.output` (and no segment marker): what a
    consumer that checks a whole output for contiguity (NeMo RL) reads. A one-segment rollout comes back as is."""
    output = (rollout.get("response") or {}).get("output") or []
    parts = segments_of(output)
    if len(parts) == 1:
        return rollout
    last = [item for item in parts[-1] if item.get("type") != SEGMENT]
    return {
        **rollout,
        "response": {**rollout["response"], "output": last},
        "gym_serve_segments_dropped": len(parts) - 1,
    }


def check_tokenizer(rollout: dict[str, Any], tokenizer: Any, *, trainer: str) -> None:
    """Raise `TokenizerMismatch` unless `tokenizer` reads the rollout's ids as the model tier wrote them.

    The model tier's ids are only worth training on with the tokenizer that made
    them: another vocabulary turns the same ids into other words. The first
    call's prompt is the tier's own rendering, so with the same tokenizer its
    ids are all in the vocabulary, decode to text that encodes back to the same
    ids, and that text holds the row's input texts; the episode holds the last
    assistant message (or function name called). A chat template adds markup
    around a text, never changes it.
    """
    calls = token_calls((rollout.get("response") or {}).get("output") or [])
    if not calls:
        raise MissingTokenIds(rollout)
    prompt_ids = calls[0]["prompt_token_ids"]
    unknown = [i for i in prompt_ids if not 0 <= i < len(tokenizer)]
    prompt = tokenizer.decode(prompt_ids)
    episode = tokenizer.decode([*calls[-1]["prompt_token_ids"], *calls[-1]["generation_token_ids"]])
    given = (rollout.get("responses_create_params") or {}).get("input") or []
    texts = [given] if isinstance(given, str) else [_text(m.get("content")) for m in given if isinstance(m, dict)]
    output = rollout["response"]["output"]
    called = [item.get("name") or "" for item in output if item.get("type") == "function_call"]
    answer = output_text(output).strip() or (called[-1] if called else "")
    problems = [f"id {unknown[0]} is outside its vocabulary of {len(tokenizer)}"] if unknown else []
    if not problems and list(tokenizer.encode(prompt, add_special_tokens=False)) != list(prompt_ids):
        problems.append("the prompt's ids decode to text it encodes to other ids")
    missing = [t for t in (t.strip() for t in texts) if t and t not in prompt]
    if answer and answer not in episode:
        missing.append(answer)
    problems += [f"{missing[0][:60]!r} is not in the decoded text"] if missing else []
    if problems:
        raise TokenizerMismatch(
            f"rollout {rollout_id(rollout)}: {trainer}'s tokenizer decodes the model tier's token ids to other text "
            f"({'; '.join(problems)}): the trainer and gym-serve's model tier must use the same tokenizer, or the "
            "trainer learns from ids that mean other words",
            key="tokenizer",
        )


def check_prompt_length(sequence: TrainingSequence, limit: int, *, setting: str) -> None:
    """Raise `PromptTooLong` when the sequence's prompt exceeds `limit` tokens (the trainer's `setting`)."""
    if len(sequence.prompt_ids) > limit:
        raise PromptTooLong(
            f"rollout (task {sequence.task_index}, rollout {sequence.rollout_index}): its prompt has "
            f"{len(sequence.prompt_ids)} tokens, over the trainer's limit of {limit}; raise `{setting}` or shorten "
            "the task (a prompt cut to fit loses the task)",
            key=setting,
        )


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return ""


def placeholder_sequence(failed: dict[str, Any], prompt_ids: list[int], filler_id: int) -> TrainingSequence:
    """A fully masked stand-in for a failed rollout, for trainers that need one row per input.

    TRL and SkyRL want exactly one completion per prompt they asked for; a
    rollout that could not finish has none. This row trains nothing (mask all
    0, reward None: "unscorable"), takes the group's prompt so it sits in the
    right group, and one `filler_id` token (the tokenizer's EOS) as completion,
    because both trainers index a completion's last token.
    """
    return TrainingSequence(
        prompt_ids=list(prompt_ids),
        completion_ids=[filler_id],
        completion_mask=[0],
        completion_logprobs=[0.0],
        reward=None,
        trainable=False,
        task_index=failed.get("_ng_task_index"),
        rollout_index=failed.get("_ng_rollout_index"),
        failure=failure_class(failed),
    )


def group_sequences(group: list[dict[str, Any]], filler_id: int) -> list[TrainingSequence]:
    """One sequence per rollout of a group (the repeats of one task); a failed one is masked on the group's prompt.

    For the trainers that take exactly one row per rollout they asked for (TRL,
    SkyRL). If every rollout of the group failed, the placeholders' prompt is
    `[filler_id]`: they train nothing either way.
    """
    built = {i: build_sequence(r) for i, r in enumerate(group) if failure_class(r) is None}
    prompt = next((s.prompt_ids for s in built.values()), [filler_id])
    return [built[i] if i in built else placeholder_sequence(r, prompt, filler_id) for i, r in enumerate(group)]


def group_advantages(rewards: Sequence[float | None], *, eps: float = 1e-8) -> list[float]:
    """One group's advantages, `(r - mean) / (std + eps)` over the scored rewards (population std); None gives 0.

    For the trainers whose hook hands over advantages (TRL's async GRPO worker
    computes exactly this); the others normalise rewards themselves.

    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, None, 0.5])]
    [1.225, -1.225, 0.0, 0.0]
    """
    scored = [r for r in rewards if r is not None and not math.isnan(r)]
    if not scored:
        return [0.0] * len(rewards)
    mean = sum(scored) / len(scored)
    std = math.sqrt(sum((r - mean) ** 2 for r in scored) / len(scored))
    return [0.0 if r is None or math.isnan(r) else (r - mean) / (std + eps) for r in rewards]
