"""A Responses request → the prompt's token ids, rendered with the model's own chat template.

Both token-returning model tiers use this (the in-replica vLLM engine and a
vLLM server over HTTP): they render locally so that they, not a server, own
the ids. When the conversation already holds an earlier call's token bundle
(`gym_serve.wire.tokens`), the prompt *extends* that call's prompt +
generation with the newly rendered turns instead of re-rendering and
re-tokenizing the history. A model may sample `<tool_call>` as eleven
single-character ids where re-tokenizing its text gives one added token; only
extending keeps the ids a trainer gets equal to what the policy saw and sampled.
"""

from __future__ import annotations

from typing import Any, Protocol

from gym_serve.wire.chat import responses_request_to_chat
from gym_serve.wire.pieces import input_items

__all__ = ["ChatTokenizer", "Tokenizer"]


class Tokenizer(Protocol):
    """What is used of a Hugging Face tokenizer."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...


class ChatTokenizer:
    """A model's tokenizer with its chat template: `prompt_ids(request)` for each call of a rollout."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def prompt_ids(self, request: dict[str, Any]) -> list[int]:
        """The prompt's token ids: the last call's ids extended by the new turns, or the whole conversation
        rendered (a first call, or a template whose rendering of the history changed)."""
        given = request["input"]
        items = input_items(given)
        chat = responses_request_to_chat({**request, "input": items})
        full = self.render(chat["messages"], chat.get("tools"), generation_prompt=True)
        last = max((i for i, item in enumerate(items) if "generation_token_ids" in item), default=None)
        if last is not None:
            earlier = responses_request_to_chat({**request, "input": items[: last + 1]})["messages"]
            prefix = self.render(earlier, chat.get("tools"), generation_prompt=False)
            if full.startswith(prefix):
                bundle = items[last]
                return [
                    *bundle["prompt_token_ids"],
                    *bundle["generation_token_ids"],
                    *self.encode(full[len(prefix) :]),
                ]
        return self.encode(full)

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, generation_prompt: bool
    ) -> str:
        """The conversation as the chat template writes it."""
        text: str = self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )
        return text

    def encode(self, text: str) -> list[int]:
        """Rendered text → ids (the template wrote the special tokens: none are added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))
