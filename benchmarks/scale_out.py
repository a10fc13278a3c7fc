"""Scale-out efficiency: rollouts/s as replicas (or driver actors) are added, against the ideal N × one's.

1. `io_verifier`: verification waits 0.5 s on I/O and a replica holds 2 at once
   (4 rollouts/s each); Environment replicas 1, 2, 4, 8 (`num_cpus: 0`).
   Target: rate(N) >= 0.8 × N × rate(1). (Small rates on purpose: at 8 replicas
   the system must stay under this 2-core machine's CPU, see autoscaling.py.)
2. `cpu_verifier`: verification burns 20 ms of CPU in one worker thread per
   replica; 1 vs 2 replicas on this 2-core machine (the other tiers need CPU
   too, so 2 is the honest ceiling here; on N nodes each node adds its cores).
3. `drivers`: 1 vs 2 `RolloutDriver` actors, each collecting one shard
   (`shard_index`/`shard_count`) of the same input, instant model.

Each point is one timed collection at a concurrency that saturates the
replicas, with its steady-state rate (20-80 % of the work).

    python benchmarks/scale_out.py [--parts io_verifier cpu_verifier drivers] [--seconds 10]

Prints a table last; writes benchmarks/results/scale_out-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import ray
from ray import serve

from gym_serve.collect.job import CollectJob

IO_LATENCY_S, IO_SLOTS, CPU_MS = 0.5, 2, 20.0


def collect_rate(work: Path, app: str, n: int, concurrency: int) -> float:
    source = harness.rows_file(work / f"in-{n}.jsonl", n)
    summary, samples = harness.collect(
        {
            "input_path": str(source),
            "output_path": str(work / f"{app}.jsonl"),
            "agents": [app],
            "default_agent": app,
            "concurrency": concurrency,
        }
    )
    return harness.steady_rate(samples) or summary["rollouts_per_s"]


def verifier_tier(work: Path, kind: str, counts: list[int], seconds: float) -> list[dict[str, Any]]:
    env = (
        {"verify_latency": {"mean_s": IO_LATENCY_S}, "max_concurrent_verifications": IO_SLOTS}
        if kind == "io_verifier"
        else {"verify_cpu_ms": CPU_MS}
    )
    per_replica = IO_SLOTS / IO_LATENCY_S if kind == "io_verifier" else 1000 / CPU_MS
    points = []
    for replicas in counts:
        app = f"{kind}-{replicas}"
        harness.deploy(
            harness.weather_app(app, model={"kind": "synthetic"}, env=env, env_deployment={"num_replicas": replicas})
        )
        n = int(per_replica * replicas * seconds)
        collect_rate(work, app, max(64, n // 10), 64)  # warm up
        rate = collect_rate(work, app, n, concurrency=max(64, 4 * IO_SLOTS * replicas))
        points.append({"part": kind, "n": replicas, "rollouts_per_s": rate, "ideal_per_replica": per_replica})
        print(f"{kind}: {replicas} replica(s) -> {rate:.1f} rollouts/s", flush=True)
        serve.delete(app)
    return _efficiency(points)


def drivers(work: Path, counts: list[int], seconds: float) -> list[dict[str, Any]]:
    from gym_serve.collect.driver import RolloutDriver

    app = "drivers"
    harness.deploy(
        harness.weather_app(
            app, model={"kind": "replay"}, env_name="example_single_tool_call", agent_deployment={"num_replicas": 2}
        )
    )
    n = int(1500 * seconds)
    source = harness.rows_file(work / "drivers-in.jsonl", n)
    points = []
    for count in counts:
        actors = [RolloutDriver.remote() for _ in range(count)]
        jobs = [
            {
                "input_path": str(source),
                "output_path": str(work / f"drivers-{count}-{i}.jsonl"),
                "agents": [app],
                "default_agent": app,
                "concurrency": 512 // count,
                "shard_index": i,
                "shard_count": count,
            }
            for i, _ in enumerate(actors)
        ]
        started = time.perf_counter()
        summaries = [
            s.model_dump()
            for s in ray.get(
                [actor.collect.remote(CollectJob.model_validate(job)) for actor, job in zip(actors, jobs, strict=True)]
            )
        ]
        rate = sum(s["rollouts"] for s in summaries) / (time.perf_counter() - started)
        for actor in actors:
            ray.kill(actor)
        points.append(
            {"part": "drivers", "n": count, "rollouts_per_s": rate, "rollouts": sum(s["rollouts"] for s in summaries)}
        )
        print(f"drivers: {count} actor(s) -> {rate:.1f} rollouts/s", flush=True)
    serve.delete(app)
    return _efficiency(points)


def _efficiency(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    one = points[0]["rollouts_per_s"] / points[0]["n"]
    for p in points:
        p["efficiency"] = p["rollouts_per_s"] / (p["n"] * one)
    return points


def plot(points: list[dict[str, Any]], path: Path) -> None:
    plt = harness.pyplot()
    parts = list(dict.fromkeys(p["part"] for p in points))
    fig, axes = plt.subplots(1, len(parts), figsize=(4 * len(parts), 3.6), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        mine = [p for p in points if p["part"] == part]
        xs = [p["n"] for p in mine]
        ax.plot(xs, [p["rollouts_per_s"] for p in mine], "o-", label="measured")
        ax.plot(xs, [x * mine[0]["rollouts_per_s"] / mine[0]["n"] for x in xs], ":", color="grey", label="N × one")
        ax.set_title(part)
        ax.set_xlabel("driver actors" if part == "drivers" else "replicas")
        ax.set_ylabel("rollouts/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=["io_verifier", "cpu_verifier", "drivers"],
        default=["io_verifier", "cpu_verifier", "drivers"],
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="rough length of each timed collection")
    args = parser.parse_args()

    harness.start()
    work = Path(tempfile.mkdtemp(prefix="gym-serve-scale-"))
    points: list[dict[str, Any]] = []
    if "io_verifier" in args.parts:
        points += verifier_tier(work, "io_verifier", [1, 2, 4, 8], args.seconds)
    if "cpu_verifier" in args.parts:
        points += verifier_tier(work, "cpu_verifier", [1, 2], args.seconds)
    if "drivers" in args.parts:
        points += drivers(work, [1, 2], args.seconds)
    ray.shutdown()

    base = harness.write_result(
        "scale_out", {"io": {"latency_s": IO_LATENCY_S, "slots": IO_SLOTS}, "cpu_ms": CPU_MS, "points": points}
    )
    plot(points, base.with_suffix(".png"))
    rows = [[p["part"], p["n"], p["rollouts_per_s"], p["efficiency"]] for p in points]
    print("\n" + harness.table(["part", "N", "rollouts/s", "vs N × one"], rows))
    print(f"-> {base}.json, .png")


if __name__ == "__main__":
    main()
