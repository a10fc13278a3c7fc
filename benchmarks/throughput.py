"""Throughput: rollouts/s, latency, CPU-ms per rollout and Little's-law efficiency versus driver concurrency.

The workload of NeMo Gym's quick-start (the weather task: 2 model turns, 1
tool call, seed, verify) through the real stack: a `RolloutDriver` actor
fanning rows out to the Agent → (Model, Environment) deployments on a local
Ray instance. Models: `replay` (instant, the recorded outputs) and the
synthetic model at a fixed latency per call (`synthetic:0`, `synthetic:0.1`,
`synthetic:1`: seconds; it also ships 256 generated token ids and log-probs
per call, as a token-returning model would).

- rollouts/s: overall (rollouts / wall time) and *steady* (the rate between 20 %
  and 80 % of the work, without ramp-up and drain);
- Little's law: with N in flight and an unloaded rollout latency L (the p50 at
  concurrency 1), an ideal system does N / L rollouts/s; efficiency = steady / (N / L);
- CPU-ms per rollout, summed over every process of the Ray instance;
- the driver actor's largest RSS during the run.

    python benchmarks/throughput.py [--models replay synthetic:0.1] [--concurrency 1 64 4096] [--seconds 10]

Prints a table last and writes benchmarks/results/throughput-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import harness
import ray
from ray import serve

N_TOKENS = 256


def model_config(model: str) -> dict[str, Any]:
    if model == "replay":
        return {"kind": "replay"}
    latency = float(model.split(":")[1])
    return {"kind": "synthetic", "latency": {"mean_s": latency}, "output_tokens": N_TOKENS, "prompt_tokens": N_TOKENS}


def guess_latency(model: str) -> float:
    return 0.012 if model == "replay" else 2 * float(model.split(":")[1]) + 0.012


def run_once(work: Path, app: str, concurrency: int, n: int) -> dict[str, Any]:
    source = harness.rows_file(work / f"in-{n}.jsonl", n)
    summary, samples = harness.collect(
        {
            "input_path": str(source),
            "output_path": str(work / "out.jsonl"),
            "agents": [app],
            "default_agent": app,
            "concurrency": concurrency,
        }
    )
    wall, cpu = summary["elapsed_s"], summary["cpu_s"]
    done = summary["rollouts"]
    return {
        "rollouts": done,
        "failures": summary["failures"],
        "seconds": wall,
        "rollouts_per_s": done / wall,
        "steady_rollouts_per_s": harness.steady_rate(samples),
        "cpu_ms_per_rollout": 1000 * cpu / done,
        "p50_ms": 1000 * summary["latency_p50_s"],
        "p95_ms": 1000 * summary["latency_p95_s"],
        "p99_ms": 1000 * summary["latency_p99_s"],
        "driver_rss_mb_max": max(s["rss_mb"] for s in samples),
        "driver_rss_mb_first": samples[0]["rss_mb"],
        "system_memory_used_mb_max": max(s["system_used_mb"] for s in samples),
        "cpu_ms_per_rollout_by_process": {
            name: round(1000 * s / done, 3) for name, s in summary["cpu_s_by_process"].items() if s > 0
        },
    }


def measure(model: str, concurrencies: list[int], seconds: float, repeats: int, work: Path) -> list[dict[str, Any]]:
    app = "bench-" + model.replace(":", "-").replace(".", "_")
    harness.deploy(harness.weather_app(app, model=model_config(model), env_name="example_single_tool_call"))
    latency = guess_latency(model)
    results = []
    for concurrency in concurrencies:
        rate = min(concurrency / latency, 3000.0)
        n = max(2 * concurrency, 20, int(rate * seconds))
        run_once(work, app, concurrency, min(n, 2 * concurrency + 20))  # warm up
        runs = [run_once(work, app, concurrency, n) for _ in range(repeats)]
        median = sorted(runs, key=lambda r: r["rollouts_per_s"])[len(runs) // 2]
        if concurrency == 1:
            latency = statistics.median(r["p50_ms"] for r in runs) / 1000
        steady = median["steady_rollouts_per_s"] or median["rollouts_per_s"]
        results.append(
            {
                "model": model,
                "concurrency": concurrency,
                "median": median,
                "runs": runs,
                "unloaded_latency_s": latency,
                "littles_law_efficiency": steady / (concurrency / latency),
            }
        )
        print(
            f"{model:>14} c={concurrency:<5} {median['rollouts_per_s']:8.1f} rollouts/s (steady {steady:8.1f}), "
            f"{median['cpu_ms_per_rollout']:.2f} CPU-ms, efficiency {results[-1]['littles_law_efficiency']:.2f}",
            flush=True,
        )
        heaviest = list(median["cpu_ms_per_rollout_by_process"].items())[:6]
        print("      CPU-ms per rollout by process: " + ", ".join(f"{n} {ms:.2f}" for n, ms in heaviest), flush=True)
    serve.delete(app)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["replay", "synthetic:0", "synthetic:0.1", "synthetic:1"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256, 1024, 4096])
    parser.add_argument("--seconds", type=float, default=8.0, help="rough length of each timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per point; the median is reported")
    args = parser.parse_args()

    harness.start()
    work = Path(tempfile.mkdtemp(prefix="gym-serve-bench-"))
    results = [r for model in args.models for r in measure(model, args.concurrency, args.seconds, args.repeats, work)]
    ray.shutdown()

    base = harness.write_result(
        "throughput",
        {
            "workload": "weather task (2 model turns, 1 tool call, verify); replay or synthetic model",
            "repeats": args.repeats,
            "results": results,
        },
    )
    plot(results, base.with_suffix(".png"))
    rows = [
        [
            r["model"],
            r["concurrency"],
            r["median"]["rollouts_per_s"],
            r["median"]["steady_rollouts_per_s"],
            r["median"]["cpu_ms_per_rollout"],
            r["median"]["p50_ms"],
            r["median"]["p95_ms"],
            r["median"]["p99_ms"],
            r["littles_law_efficiency"],
            r["median"]["driver_rss_mb_max"],
        ]
        for r in results
    ]
    print(
        "\n"
        + harness.table(
            [
                "model",
                "in flight",
                "rollouts/s",
                "steady/s",
                "CPU-ms",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "Little eff.",
                "driver MB",
            ],
            rows,
        )
    )
    print(f"(median of {args.repeats}) -> {base}.json, .png")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    plt = harness.pyplot()
    fig, (rate, cpu) = plt.subplots(1, 2, figsize=(11, 4))
    for model in dict.fromkeys(r["model"] for r in results):
        mine = [r for r in results if r["model"] == model]
        xs = [r["concurrency"] for r in mine]
        rate.plot(
            xs,
            [r["median"]["steady_rollouts_per_s"] or r["median"]["rollouts_per_s"] for r in mine],
            "o-",
            label=model,
        )
        cpu.plot(xs, [r["median"]["cpu_ms_per_rollout"] for r in mine], "s--", label=model)
    for ax, label in ((rate, "rollouts/s (steady)"), (cpu, "CPU-ms per rollout")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rollouts in flight (driver concurrency)")
        ax.set_ylabel(label)
        ax.legend()
    cpu.set_yscale("log")
    rate.set_title("weather task: throughput vs concurrency")
    cpu.set_title("CPU per rollout (all Ray processes)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
