"""The OpenAI-compatible Model tier: any endpoint that speaks the OpenAI API, through the official async client.

The OpenAI API itself, a `vllm serve` server, other providers. `api: responses`
sends Responses requests as they are; `api: chat` converts them to Chat
Completions and back (`gym_serve.wire.chat`). The client retries 429, 5xx,
connection errors and timeouts with exponential backoff; a semaphore bounds the
requests one replica has in flight. The key comes from config or an
environment variable (the replica's own, else the value the deployer published
to the cluster, `gym_serve.serving.secrets`) and is held as a secret: it appears
in no log, error, rollout or anything served over HTTP.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve

from gym_serve.errors import ModelError
from gym_serve.serving import secrets
from gym_serve.serving.autoscaling import Load
from gym_serve.serving.batching import BatchedResponses
from gym_serve.serving.config import OpenAIModelArgs
from gym_serve.wire.chat import chat_response_to_responses, responses_request_to_chat

__all__ = ["OpenAIModelDeployment"]

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}

_RESPONSES_FIELDS = (
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "metadata",
)


@serve.deployment(name="Model")
class OpenAIModelDeployment(BatchedResponses):
    def __init__(self, args: OpenAIModelArgs) -> None:
        from openai import AsyncOpenAI

        key = args.api_key.get_secret_value() if args.api_key else secrets.lookup(args.api_key_env)
        self.args = args
        self.client = AsyncOpenAI(
            base_url=args.base_url, api_key=key or "none", max_retries=args.max_retries, timeout=args.timeout_s
        )
        self.slots = asyncio.Semaphore(args.max_concurrency)
        self.load = Load()
        self.responses = self.load.track(self._respond)

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()

    async def _respond(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        async with self.slots:
            try:
                if self.args.api == "chat":
                    chat = responses_request_to_chat(request)
                    completion = await self.client.chat.completions.create(**{**chat, "model": self.args.model})
                    return chat_response_to_responses(completion.model_dump(exclude_none=True))
                params = {k: request[k] for k in _RESPONSES_FIELDS if request.get(k) is not None}
                response = await self.client.responses.create(**params, model=self.args.model)
                return response.model_dump(exclude_none=True)
            except Exception as e:  # the client's messages carry no key; keep only its class and text
                raise ModelError(f"{self.client.base_url} ({self.args.api}): {type(e).__name__}: {e}") from None
