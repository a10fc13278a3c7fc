"""The real model path: the weather task against a model behind HTTP (`kind: openai`) vs the embedded replay model.

The model is the instant OpenAI-compatible server (`gym_serve.testing.instant_openai_server`), in a process of
its own, so what is measured is gym-serve's own cost of a model behind HTTP. Both systems run in the same
Ray instance and the same run, alternating per repeat, so a noisy neighbour hits both alike:

- `http`: `model: {kind: openai, base_url: <instant server>}` (the lean aiohttp client);
- `replay`: `model: {kind: replay}` (recorded outputs, no HTTP).

For each concurrency (rollouts in flight), N rollouts per run, median of R runs: rollouts/s, p50/p99 latency,
CPU-ms per rollout over every process of the Ray instance (the fake server's CPU apart), and HTTP / replay.

    python benchmarks/http_model.py [--concurrency 1 16 64 256 1024] [--rollouts 2000] [--repeats 3]

With `--trace FILE`, each system also runs traced (`<system>+trace`: one OpenTelemetry trace per rollout, to FILE,
emptied before each run), alternating with its untraced runs, and the table gives traced / untraced rollouts/s:
the cost of tracing (issue 30's target: at most 5 % at 256 in flight).

Prints a table last and writes benchmarks/results/http_model-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import harness
import psutil

from gym_serve.testing.instant_openai_server import start_instant_server

SYSTEMS = ("http", "replay")
TARGET_RATE, TARGET_CPU_MS = 350, 4.5
"""The HTTP tier's targets at 64-1,024 in flight (issue 14), drawn on the plot."""


def model_config(system: str, base_url: str, api: str) -> dict[str, Any]:
    if system == "replay":
        return {"kind": "replay"}
    return {"kind": "openai", "base_url": base_url, "model": "instant", "api": api, "api_key_env": "NO_KEY_NEEDED"}


def weather_app(name: str, model: dict[str, Any]) -> dict[str, Any]:
    app = harness.weather_app(name, model=model, env_name="example_single_tool_call")
    if model["kind"] != "replay":
        del app["args"]["model"]["recordings"]  # only the replay model plays recordings
    return app


def run_once(
    work: Path,
    app: str,
    concurrency: int,
    n: int,
    server: psutil.Process,
    trace: str | None = None,
    trace_sample: float = 1.0,
) -> dict[str, Any]:
    source = harness.rows_file(work / f"in-{n}.jsonl", n)
    if trace is not None and not trace.startswith("http"):
        Path(trace).write_bytes(b"")
    server_cpu = _cpu(server)
    summary, _ = harness.collect(
        {
            "input_path": str(source),
            "output_path": str(work / f"out-{app}.jsonl"),
            "agents": [app],
            "default_agent": app,
            "concurrency": concurrency,
            "trace": trace,
            "trace_sample": trace_sample,
        }
    )
    done = summary["rollouts"]
    wall = summary["elapsed_s"]
    server_cpu = _cpu(server) - server_cpu  # a child of this process, so inside `cpu_s` too: counted apart
    return {
        "rollouts": done,
        "failures": summary["failures"],
        "mean_reward": summary["mean_reward"],
        "seconds": wall,
        "rollouts_per_s": done / wall,
        "cpu_ms_per_rollout": 1000 * (summary["cpu_s"] - server_cpu) / max(done, 1),
        "server_cpu_ms_per_rollout": 1000 * server_cpu / max(done, 1),
        "p50_ms": 1000 * (summary["latency_p50_s"] or 0.0),
        "p99_ms": 1000 * (summary["latency_p99_s"] or 0.0),
    }


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rollouts/s, plus min and max of the rate."""
    ordered = sorted(runs, key=lambda r: r["rollouts_per_s"])
    rates = [r["rollouts_per_s"] for r in ordered]
    return {**ordered[len(ordered) // 2], "rollouts_per_s_min": rates[0], "rollouts_per_s_max": rates[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256, 1024])
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point and system; the median is reported")
    parser.add_argument("--api", choices=["responses", "chat"], default="responses", help="what the HTTP tier speaks")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--trace-sample", type=float, default=1.0, help="with --trace: the share of rollouts traced")
    parser.add_argument(
        "--trace",
        metavar="FILE|URL",
        help="also run each system traced to FILE (or an OTLP endpoint), alternating: the cost of tracing",
    )
    parser.add_argument(
        "--serve-throughput-optimized",
        action="store_true",
        help="start Ray with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (gRPC handle transport, router and user code on one "
        "loop): a Serve-wide mode gym-serve does not set by default; it cuts a handle call's latency ~2.5x here",
    )
    args = parser.parse_args()
    if args.serve_throughput_optimized:
        os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"  # read by every Ray process started from here

    load_at_start = os.getloadavg()
    base_url, process = start_instant_server()
    server = psutil.Process(process.pid)
    results: list[dict[str, Any]] = []
    try:
        harness.start()
        apps = {system: f"bench-{system}" for system in args.systems}
        harness.deploy(*(weather_app(app, model_config(system, base_url, args.api)) for system, app in apps.items()))
        work = Path(tempfile.mkdtemp(prefix="gym-serve-bench-"))
        variants = {system: (app, None) for system, app in apps.items()}
        if args.trace:
            trace = args.trace if args.trace.startswith("http") else str(Path(args.trace).resolve())
            variants.update({f"{system}+trace": (app, trace) for system, app in apps.items()})
        for concurrency in args.concurrency:
            runs: dict[str, list[dict[str, Any]]] = {label: [] for label in variants}
            for app, trace_to in variants.values():  # warm up: connections, replicas' caches
                warm_up = min(args.rollouts, 2 * concurrency + 20)
                run_once(work, app, concurrency, warm_up, server, trace_to, args.trace_sample)
            for _ in range(args.repeats):
                for label, (app, trace_to) in variants.items():  # alternate: load from elsewhere hits all alike
                    runs[label].append(
                        run_once(work, app, concurrency, args.rollouts, server, trace_to, args.trace_sample)
                    )
            point = {"concurrency": concurrency, **{s: {"median": median_run(r), "runs": r} for s, r in runs.items()}}
            for system in apps:
                if f"{system}+trace" in point:
                    point[f"{system}_traced_vs_untraced"] = (
                        point[f"{system}+trace"]["median"]["rollouts_per_s"]
                        / point[system]["median"]["rollouts_per_s"]
                    )
            if "http" in point and "replay" in point:
                point["ratio_http_replay"] = (
                    point["http"]["median"]["rollouts_per_s"] / point["replay"]["median"]["rollouts_per_s"]
                )
            results.append(point)
            for system in variants:
                m = point[system]["median"]
                print(
                    f"{system:>7} c={concurrency:<5} {m['rollouts_per_s']:8.1f} rollouts/s "
                    f"({m['rollouts_per_s_min']:.1f}-{m['rollouts_per_s_max']:.1f}), p50 {m['p50_ms']:.1f} ms, "
                    f"p99 {m['p99_ms']:.1f} ms, {m['cpu_ms_per_rollout']:.2f} CPU-ms "
                    f"(+ server {m['server_cpu_ms_per_rollout']:.2f}), failures {m['failures']}",
                    flush=True,
                )
            for system in apps:
                if f"{system}_traced_vs_untraced" in point:
                    ratio = point[f"{system}_traced_vs_untraced"]
                    print(f"{system:>7} c={concurrency:<5} traced / untraced rollouts/s: {ratio:.3f}", flush=True)
    finally:
        process.terminate()
        process.wait(timeout=10)
        import ray

        ray.shutdown()

    base = harness.write_result(
        "http_model",
        {
            "workload": "weather task (2 model turns, 1 tool call, verify); instant OpenAI-compatible server",
            "api": args.api,
            "serve_throughput_optimized": args.serve_throughput_optimized,
            "trace": args.trace,
            "trace_sample": args.trace_sample,
            "rollouts_per_run": args.rollouts,
            "repeats": args.repeats,
            "load_average_at_start": load_at_start,
            "results": results,
        },
    )
    plot(results, list(variants), base.with_suffix(".png"))
    rows = []
    for point in results:
        for system in variants:
            m = point[system]["median"]
            rows.append(
                [
                    system,
                    point["concurrency"],
                    m["rollouts_per_s"],
                    f"{m['rollouts_per_s_min']:.0f}-{m['rollouts_per_s_max']:.0f}",
                    m["p50_ms"],
                    m["p99_ms"],
                    m["cpu_ms_per_rollout"],
                    m["server_cpu_ms_per_rollout"],
                    point.get("ratio_http_replay") if system == "http" else None,
                    point.get(f"{system.removesuffix('+trace')}_traced_vs_untraced") if "+trace" in system else None,
                ]
            )
    print(
        "\n"
        + harness.table(
            [
                "system",
                "in flight",
                "rollouts/s",
                "min-max",
                "p50 ms",
                "p99 ms",
                "CPU-ms",
                "server CPU-ms",
                "vs replay",
                "traced/untraced",
            ],
            rows,
        )
    )
    print(f"-> {base.with_suffix('.json')}")


def plot(results: list[dict[str, Any]], systems: list[str], path: Path) -> None:
    plt = harness.pyplot()
    fig, (rate, cpu) = plt.subplots(1, 2, figsize=(11, 4))
    for system in systems:
        xs = [p["concurrency"] for p in results]
        rate.plot(xs, [p[system]["median"]["rollouts_per_s"] for p in results], marker="o", label=system)
        cpu.plot(xs, [p[system]["median"]["cpu_ms_per_rollout"] for p in results], marker="o", label=system)
    rate.axhline(TARGET_RATE, color="grey", linestyle="--", linewidth=1, label=f"target {TARGET_RATE}/s (64-1,024)")
    cpu.axhline(TARGET_CPU_MS, color="grey", linestyle="--", linewidth=1, label=f"target {TARGET_CPU_MS} CPU-ms")
    for axis, label in ((rate, "rollouts/s (median)"), (cpu, "CPU-ms per rollout")):
        axis.set_xscale("log")
        axis.set_xlabel("rollouts in flight")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend()
    cpu.set_yscale("log")
    rate.set_title("weather task, model behind HTTP vs replay")
    cpu.set_title("CPU per rollout (all Ray processes; server apart)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
