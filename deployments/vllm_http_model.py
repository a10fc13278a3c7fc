"""The vLLM-over-HTTP Model tier: token ids in, token ids and log-probs out, against a vLLM server you run.

For a trainer-owned engine (NeMo RL, verl and SkyRL run their own vLLM and hand
out an HTTP endpoint): the same token bundles and contiguity as the in-replica
`kind: vllm` tier, with the engine elsewhere. Each call renders the new turns
with the model's own chat template here (`gym_serve.wire.chat_template`:
`tokenizer` in the config), extends the previous call's prompt + generation
ids, and sends the ids to the server's `POST /v1/completions` with
`return_token_ids` and `return_tokens_as_token_ids`: the answer's
`choices[0].token_ids` are the sampled ids (a final EOS included) and
`logprobs.token_logprobs` their log-probabilities. Tool calls and reasoning are
parsed from the text (`gym_serve.wire.hermes`), as in the vLLM tier.

Every sampling parameter is sent explicitly (vLLM's OpenAI layer fills omitted
ones from the model's `generation_config.json`, the engine does not), and
`max_tokens` always (its default is 16). The server's weight versions ride on
the bundle as `weight_versions` (`[{version, start, end}]` over the generated
ids) where the server reports them (vLLM >= 0.33 with `return_weight_versions`;
0.32 ignores the field), and, when they are integers, as the bundle's
`policy_version` and `policy_version_spans`, as the vLLM tier reports its own.

At start-up each replica probes the server (`probe`): a server that cannot
return token ids and log-probs, or whose tokenizer differs from `tokenizer`, is
a configuration error then, never a run of token-less rollouts.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel
from ray import serve

from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import BatchedResponses
from gym_serve.errors import ConfigError, ModelError
from gym_serve.models.http_endpoint import HTTPEndpoint
from gym_serve.serving.config import VLLMHTTPModelArgs
from gym_serve.wire.chat_template import ChatTokenizer
from gym_serve.wire.hermes import parse_output, structured_output
from gym_serve.wire.tokens import POLICY_VERSION, POLICY_VERSION_SPANS, token_response

__all__ = ["ServerInfo", "VLLMHTTPModelDeployment", "probe"]

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}

logger = logging.getLogger(__name__)


@serve.deployment(name="Model")
class VLLMHTTPModelDeployment(BatchedResponses):
    async def __init__(self, args: VLLMHTTPModelArgs) -> None:  # type: ignore[misc]  # Serve awaits it
        from transformers import AutoTokenizer

        self.args = args
        self.chat = ChatTokenizer(AutoTokenizer.from_pretrained(args.tokenizer))
        self.endpoint = args.endpoint()
        self.server = await probe(self.endpoint, self.chat, args.model)
        logger.info("vllm_http: %s serves %s (vLLM %s)", args.base_url, self.server.model, self.server.version)
        self.load = Load()

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()

    @counted
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        prompt_ids = self.chat.prompt_ids(request)
        room = self.server.max_model_len - len(prompt_ids)
        if room <= 0:  # the conversation outgrew the context: an incomplete answer, not an error
            return token_response(self.server.model, [], prompt_ids, [], [], "length")
        wanted = int(request.get("max_output_tokens") or self.args.default_max_output_tokens)
        body = completion_body(self.server.model, prompt_ids, min(wanted, room), request)
        completion = read_completion(await self.endpoint.post("/v1/completions", body), prompt_ids)
        extra = _version_fields(completion.weight_versions)
        return token_response(
            self.server.model,
            parse_output(completion.text),
            prompt_ids,
            completion.token_ids,
            completion.log_probs,
            completion.finish_reason,
            **extra,
        )


class ServerInfo(BaseModel):
    """What the start-up probe learned about the server."""

    model: str
    max_model_len: int
    version: str | None = None


class Completion(BaseModel):
    """One `/v1/completions` answer, checked: the ids and log-probs line up."""

    text: str
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str | None
    weight_versions: list[dict[str, Any]] | None = None


def completion_body(model: str, prompt_ids: list[int], max_tokens: int, request: dict[str, Any]) -> dict[str, Any]:
    """The `/v1/completions` request for a Responses request whose prompt is `prompt_ids`."""
    temperature, top_p = request.get("temperature"), request.get("top_p")
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        # every knob explicit: the server would fill omitted ones from the model's generation_config.json
        "temperature": 1.0 if temperature is None else temperature,
        "top_p": 1.0 if top_p is None else top_p,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "logprobs": 0,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "return_weight_versions": True,
    }
    if request.get("seed") is not None:
        body["seed"] = request["seed"]
    constraint = structured_output(request)
    if constraint is not None:
        body["structured_outputs"] = constraint
    return body


def read_completion(answer: dict[str, Any], sent: list[int]) -> Completion:
    """The generated ids, their log-probs and text from a `/v1/completions` answer; a ModelError if any is missing."""
    try:
        choice = answer["choices"][0]
        generated, logprobs = choice.get("token_ids"), (choice.get("logprobs") or {}).get("token_logprobs")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ModelError(f"a /v1/completions answer without `choices[0]`: {str(answer)[:200]}") from None
    if not isinstance(generated, list) or not isinstance(logprobs, list):
        raise ModelError(
            "the server returned no `choices[0].token_ids` or `logprobs.token_logprobs` "
            "(it needs vLLM >= 0.10.2, which honours `return_token_ids`)"
        )
    if len(generated) != len(logprobs):
        raise ModelError(f"{len(generated)} generated ids but {len(logprobs)} log-probs")
    if choice.get("prompt_token_ids") != sent:
        raise ModelError("the server's `prompt_token_ids` differ from the ids sent")
    if choice.get("finish_reason") == "abort":  # paused or aborted mid-generation: partial, not a result
        raise ModelError("the server aborted the generation (paused for a weight update?)")
    return Completion(
        text=choice.get("text") or "",
        token_ids=generated,
        log_probs=logprobs,
        finish_reason=choice.get("finish_reason"),
        weight_versions=choice.get("weight_versions"),
    )


async def probe(endpoint: HTTPEndpoint, chat: ChatTokenizer, model: str | None) -> ServerInfo:
    """Check that the server is a vLLM server that returns exact ids and log-probs for this tokenizer.

    vLLM accepts unknown request fields without a word, so a 200 proves nothing:
    the probe checks the *answers* (the served model and its context length,
    the server tokenizing a rendered conversation to the same ids as the local
    tokenizer, a 2-token completion returning its ids and log-probs).
    """

    def wrong(why: str) -> ConfigError:
        return ConfigError(
            f"{why}. `kind: vllm_http` needs a vLLM (>= 0.10.2) OpenAI-compatible server of the model "
            "whose tokenizer is `tokenizer`",
            source=endpoint.base_url,
            key="model.base_url",
        )

    try:
        version = (await endpoint.get("/version")).get("version")
    except ModelError:  # informational only: a proxy may hide it
        version = None
    try:
        served = {entry["id"]: entry for entry in (await endpoint.get("/v1/models"))["data"]}
    except (ModelError, KeyError, TypeError) as e:
        raise wrong(f"GET /v1/models gave no model list ({e})") from None
    name = model or next(iter(served), "")
    if name not in served:
        raise wrong(f"model `{model}` is not served here (it serves {', '.join(served) or 'nothing'})")
    max_model_len = served[name].get("max_model_len")
    if not isinstance(max_model_len, int):
        raise wrong(f"GET /v1/models says nothing of `{name}`'s max_model_len (not a vLLM server?)")
    conversation = [  # everyday words: tokenizers that differ split them differently
        {"role": "system", "content": "You are a helpful personal assistant."},
        {"role": "user", "content": "What's the weather like in San Francisco today? Answer: yes, no, maybe."},
    ]
    text = chat.render(conversation, None, generation_prompt=True)
    ids = chat.encode(text)
    try:
        tokenized = await endpoint.post("/tokenize", {"model": name, "prompt": text, "add_special_tokens": False})
    except ModelError as e:
        raise wrong(f"POST /tokenize failed ({e})") from None
    if tokenized.get("tokens") != ids:
        raise wrong("the server tokenizes a rendered conversation to other ids than `tokenizer` does")
    body = completion_body(name, ids, 2, {"temperature": 0.0})
    try:
        read_completion(await endpoint.post("/v1/completions", body), ids)
    except ModelError as e:
        raise wrong(f"a 2-token completion came back without usable token ids: {e}") from None
    return ServerInfo(model=name, max_model_len=max_model_len, version=version)


def _version_fields(weight_versions: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The server's weight versions on the bundle; as policy versions too where they are integers."""
    if not weight_versions:
        return {}
    fields: dict[str, Any] = {"weight_versions": weight_versions}
    try:
        spans = [[int(str(v["version"])), int(v["start"]), int(v["end"])] for v in weight_versions]
    except (KeyError, TypeError, ValueError):  # a named version (a string): kept as the server said it
        return fields
    return {**fields, POLICY_VERSION: spans[0][0], POLICY_VERSION_SPANS: spans}
