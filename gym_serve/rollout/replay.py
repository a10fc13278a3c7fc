"""The replay model: plays back recorded model outputs, keyed by the conversation.

Recordings are rollout files in NeMo Gym's format (`example_rollouts.jsonl`):
each row's `responses_create_params.input` plus `response.output` is one
recorded episode. An episode is cut into model turns (each maximal run of
model-made items: messages, function calls, reasoning); each turn is stored
under the key of the conversation that preceded it. Asked a conversation, the
model looks its key up and answers with that turn, so a whole episode runs
offline, deterministically, with no weights and no API key.

Episodes whose reward is below the best reward recorded for the same prompt
are *wrong variants*. With `error_rate > 0`, a rollout (chosen by a hash of
its session and prompt, so the choice is repeatable) follows a wrong variant
where one was recorded, or else has its final answer replaced, so rewards
vary. A row may also hold the calls a helper model answered while it was
verified (a judge's: `{responses_create_params, response}` pairs inside the
row, `recorded_judge_calls`); those are answered as recorded, never varied, so
a server whose judge is this model gives its recorded verdicts. A conversation
with no recording raises `ReplayMissError`: its rollout
becomes a failure row (`replay_miss`, masked), because a made-up answer is
not the policy's and must never be scored. The error's text (`miss_text`) is
also a non-answer every environment's verifier is checked to score 0
(`gym-serve env test`), for when it reaches one another way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_serve.errors import InputError, ReplayMissError
from gym_serve.verifiers.non_answer import REPLAY_MISS_PREFIX
from gym_serve.wire.chat import chat_request_to_responses, chat_response_to_responses
from gym_serve.wire.jsonl import read_jsonl
from gym_serve.wire.pieces import assistant_message, input_items, usage

__all__ = ["MISS_PREFIX", "ReplayModel", "conversation_key", "miss_text", "recorded_judge_calls"]

_MODEL_MADE = {"function_call", "reasoning"}
CORRUPTED_ANSWER = "I'm not sure."
MISS_PREFIX = REPLAY_MISS_PREFIX


def miss_text(key: str, items: int, sources: list[str]) -> str:
    """What the replay model says of a conversation it has no recording of (the `ReplayMissError` message)."""
    return (
        f"{MISS_PREFIX} (key {key[:12]}, {items} items). The replay model answers only conversations "
        f"recorded in: {', '.join(sources) or 'no files'}."
    )


def conversation_key(items: list[dict[str, Any]]) -> str:
    """A stable key of a conversation: what was said, not ids or formatting."""
    normalized = [_normalize(item) for item in items]
    digest = hashlib.sha256(json.dumps(normalized, separators=(",", ":")).encode())
    return digest.hexdigest()[:32]


@dataclass
class _Turn:
    output: list[dict[str, Any]]
    correct: bool


@dataclass
class _Variants:
    correct: list[_Turn] = field(default_factory=list)
    wrong: list[_Turn] = field(default_factory=list)


class ReplayModel:
    """Answers Responses requests from recordings; see the module docstring."""

    def __init__(self, recordings: list[Path], *, error_rate: float = 0.0, name: str = "replay") -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be within [0, 1], got {error_rate}")
        self.error_rate = error_rate
        self.name = name
        self.sources = [str(p) for p in recordings]
        self._turns: dict[str, _Variants] = {}
        self._helper_turns: dict[str, list[dict[str, Any]]] = {}
        for path in recordings:
            self._load(Path(path))

    @classmethod
    def for_environment(cls, env: type[Any], *, error_rate: float = 0.0) -> ReplayModel:
        """The replay model over an environment's own `data/example_rollouts.jsonl`."""
        return cls([env.data_dir() / "example_rollouts.jsonl"], error_rate=error_rate, name=f"replay:{env.name()}")

    @property
    def num_keys(self) -> int:
        return len(self._turns)

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        return self.respond(request, session)

    def respond(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        conversation = _conversation(request)
        key = conversation_key(conversation)
        variants = self._turns.get(key)
        if variants is None:
            if key in self._helper_turns:  # a judge's call recorded inside a row: its recorded verdict
                return self._response(key, self._helper_turns[key], conversation, "recorded")
            raise ReplayMissError(miss_text(key, len(conversation), self.sources))
        goes_wrong = self._goes_wrong(conversation, session)
        if goes_wrong and variants.wrong:
            return self._response(key, variants.wrong[0].output, conversation, "wrong")
        turn = (variants.correct or variants.wrong)[0]
        if goes_wrong and not variants.wrong and _is_final(turn.output):
            return self._response(key, _corrupt(turn.output), conversation, "corrupted")
        return self._response(key, turn.output, conversation, "correct" if turn.correct else "wrong")

    def _goes_wrong(self, conversation: list[dict[str, Any]], session: str | None) -> bool:
        if self.error_rate <= 0.0:
            return False
        prompt_key = conversation_key(_prompt(conversation))
        digest = hashlib.sha256(f"{prompt_key}|{session}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.error_rate

    def _load(self, path: Path) -> None:
        episodes: list[tuple[list[dict[str, Any]], list[dict[str, Any]], float]] = []
        for line, row in read_jsonl(path):
            try:
                conversation = _conversation(row["responses_create_params"])
                output = row["response"]["output"]
                reward = float(row.get("reward", 0.0))
            except (KeyError, TypeError, ValueError) as e:
                message = f"not a recorded rollout: {type(e).__name__}: {e}"
                raise InputError(message, source=str(path), line=line) from e
            episodes.append((conversation, output, reward))
            for call in recorded_judge_calls(row):
                helper = _conversation(call["responses_create_params"])
                for prefix, turn in _turns(helper, call["response"]["output"]):
                    self._helper_turns.setdefault(conversation_key(prefix), turn)
        best: dict[str, float] = {}
        for conversation, _, reward in episodes:
            prompt = conversation_key(_prompt(conversation))
            best[prompt] = max(best.get(prompt, reward), reward)
        for conversation, output, reward in episodes:
            correct = reward >= best[conversation_key(_prompt(conversation))]
            for prefix, turn in _turns(conversation, output):
                self._add(conversation_key(prefix), _Turn(turn, correct))

    def _add(self, key: str, turn: _Turn) -> None:
        variants = self._turns.setdefault(key, _Variants())
        bucket = variants.correct if turn.correct else variants.wrong
        if all(_normalize_all(t.output) != _normalize_all(turn.output) for t in bucket):
            bucket.append(turn)

    def _response(
        self, key: str, output: list[dict[str, Any]], conversation: list[dict[str, Any]], variant: str
    ) -> dict[str, Any]:
        input_tokens = _approx_tokens(conversation)
        output_tokens = _approx_tokens(output)
        return {
            "id": f"resp_replay_{key[:24]}",
            "object": "response",
            "created_at": 0.0,
            "model": self.name,
            "status": "completed",
            "output": [dict(item) for item in output],
            "usage": usage(input_tokens, output_tokens),
            "metadata": {"replay_variant": variant},
        }


def recorded_judge_calls(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    """The model calls a server made while NeMo Gym verified a recorded rollout, where it kept them: every
    `{responses_create_params, response}` pair inside the row (`judge_evaluations`, `judge_evaluation`, ...), and
    every `{chat_create_params, response}` pair of a judge called over Chat Completions (`criterion_evaluations`),
    as recordings of their own (`reward` 1.0). A Chat Completions pair is recorded in the Responses form the host
    asks a Model tier in.

    >>> chat = {"messages": [{"role": "user", "content": "Grade."}], "max_tokens": 9, "tools": None}
    >>> answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "1"}, "finish_reason": "stop"}]}
    >>> [call["responses_create_params"]["input"][0]["content"] for call in
    ...     recorded_judge_calls({"evaluations": [{"chat_create_params": chat, "response": answer}]})]
    ['Grade.']
    """
    found: list[dict[str, Any]] = []

    def walk(value: Any, top: bool) -> None:
        if isinstance(value, dict):
            pair = "responses_create_params" in value and isinstance(value.get("response"), dict)
            if pair and not top and isinstance(value["response"].get("output"), list):
                found.append({**{k: value[k] for k in ("responses_create_params", "response")}, "reward": 1.0})
                return
            chat = value.get("chat_create_params")
            if isinstance(chat, dict) and isinstance(value.get("response"), dict) and value["response"].get("choices"):
                request = chat_request_to_responses({k: v for k, v in chat.items() if v is not None})
                response = chat_response_to_responses(value["response"])
                found.append({"responses_create_params": request, "response": response, "reward": 1.0})
                return
            for key, item in value.items():
                if not (top and key in ("responses_create_params", "response")):
                    walk(item, False)
        elif isinstance(value, list):
            for item in value:
                walk(item, False)

    walk(recorded, True)
    return found


def _conversation(params: dict[str, Any]) -> list[dict[str, Any]]:
    value = params.get("input", [])
    items = input_items(value)
    instructions = params.get("instructions")
    if instructions:
        items.insert(0, {"type": "message", "role": "system", "content": instructions})
    return items


def _is_model_made(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    return kind in _MODEL_MADE or (kind == "message" and item.get("role") == "assistant")


def _prompt(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation up to the first item the model made."""
    for i, item in enumerate(conversation):
        if _is_model_made(item):
            return conversation[:i]
    return conversation


def _turns(conversation: list[dict[str, Any]], output: list[dict[str, Any]]):
    """Yield (conversation before the turn, the turn's items) for each model turn of an episode."""
    history = list(conversation)
    i = 0
    while i < len(output):
        if not _is_model_made(output[i]):
            history.append(output[i])
            i += 1
            continue
        j = i
        while j < len(output) and _is_model_made(output[j]):
            j += 1
        yield list(history), output[i:j]
        history.extend(output[i:j])
        i = j


def _is_final(output: list[dict[str, Any]]) -> bool:
    return not any(item.get("type") == "function_call" for item in output)


def _corrupt(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [item for item in output if item.get("type") != "message"]
    return [*kept, assistant_message(CORRUPTED_ANSWER, "msg_replay_corrupted")]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _canonical_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (json.JSONDecodeError, TypeError):
        return text.strip()


def _normalize(item: dict[str, Any]) -> list[str]:
    kind = item.get("type", "message")
    if kind == "message":
        return ["message", item.get("role", ""), _text(item.get("content")).strip()]
    if kind == "function_call":
        return ["function_call", item.get("name", ""), _canonical_json(item.get("arguments", ""))]
    if kind == "function_call_output":
        return ["function_call_output", _canonical_json(_text(item.get("output")))]
    if kind == "reasoning":
        return ["reasoning", " ".join(_text(part.get("text")) for part in item.get("summary", []))]
    return [kind, json.dumps(item, sort_keys=True)]


def _normalize_all(items: list[dict[str, Any]]) -> list[list[str]]:
    return [_normalize(item) for item in items]


def _approx_tokens(items: list[dict[str, Any]]) -> int:
    """About four characters a token: replay has no tokenizer, and usage should still be plausible."""
    chars = sum(len(part) for item in items for part in _normalize(item)[1:])
    return max(1, (chars + 3) // 4)
