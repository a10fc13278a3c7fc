"""The OpenAI-compatible Model tier: any endpoint that speaks the OpenAI API, over a lean HTTP client.

The OpenAI API itself, a `vllm serve` server, other providers. `api: responses`
sends Responses requests as they are; `api: chat` converts them to Chat
Completions and back (`gym_serve.wire.chat`). Calls go through one pooled
aiohttp session per replica (`gym_serve.models.http_endpoint`: retries on 429,
5xx, connection errors and timeouts with backoff; at most `max_concurrency` in
flight), not the official `openai` client, which cost about 6 ms of CPU per call
here against ~0.5 ms (see that module). The key comes from config or an
environment variable (the replica's own, else the value the deployer published
to the cluster, `gym_serve.serving.secrets`) and is held as a secret: it appears in no log, error,
rollout or anything served over HTTP.
"""

from __future__ import annotations

from typing import Any

from ray import serve

from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import BatchedResponses
from gym_serve.errors import ModelError
from gym_serve.models.http_endpoint import responses_over_chat
from gym_serve.serving.config import OpenAIModelArgs
from gym_serve.wire.chat import responses_request_to_chat

__all__ = ["OpenAIModelDeployment"]

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}

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
        self.args = args
        self.endpoint = args.endpoint()
        self.load = Load()

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()

    @counted
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        if self.args.api == "chat":
            chat = {**responses_request_to_chat(request), "model": self.args.model}
            return await responses_over_chat(self.endpoint, chat)
        params = {k: request[k] for k in _RESPONSES_FIELDS if request.get(k) is not None}
        params["model"] = self.args.model
        response = await self.endpoint.post("/responses", params)
        if not isinstance(response.get("output"), list):
            raise ModelError(f"{self.endpoint.base_url}/responses: an answer without an `output` list")
        return response
