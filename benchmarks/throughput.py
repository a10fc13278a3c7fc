"""Throughput: rollouts/s, latency and CPU-ms per rollout versus driver concurrency, on the weather task.

The workload NeMo Gym's quick-start runs (2 model turns, 1 tool call, verify)
with the instant replay model, through the real stack: a `RolloutDriver` actor
fanning rows out to the Agent → (Model, Environment) deployments of
`deployments/example_single_tool_call.yaml` on a local Ray instance. CPU time
is summed over every process of that instance (driver, replicas, Serve
controller, raylet, GCS) and this one; run it with no other Ray instance on
the machine (their `ray::` workers would be counted too).

    python benchmarks/throughput.py [--concurrency 1 16 64 256 1024 4096] [--rollouts 4000] [--repeats 3]

Prints a table last and writes benchmarks/results/throughput-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psutil
import ray

from gym_serve import serving
from gym_serve.config import load_serve_config
from gym_serve.driver import RolloutDriver

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "deployments" / "example_single_tool_call.yaml"
ROWS = REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl"


def session_processes() -> list[psutil.Process]:
    """This process and every process of the local Ray instance it started (GCS, raylet, workers, replicas)."""
    session = Path(ray._private.worker._global_node.get_session_dir_path()).name
    found = {psutil.Process().pid: psutil.Process()}
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if session in cmdline or cmdline.startswith("ray::"):  # Ray names its workers `ray::<actor>`
            found[proc.pid] = proc
            found.update({child.pid: child for child in proc.children(recursive=True)})
    return list(found.values())


def cpu_seconds() -> float:
    total = 0.0
    for proc in session_processes():
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def run_once(source: Path, out: Path, concurrency: int) -> dict:
    driver = RolloutDriver.remote()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    summary = ray.get(driver.collect.remote({
        "input_path": str(source), "output_path": str(out), "agents": ["example_single_tool_call"],
        "default_agent": "example_single_tool_call", "concurrency": concurrency}))
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    ray.kill(driver)
    n = summary["rollouts"]
    return {"rollouts": n, "failures": summary["failures"], "seconds": wall, "rollouts_per_s": n / wall,
            "cpu_ms_per_rollout": 1000 * cpu / n, "p50_ms": 1000 * summary["latency_p50_s"],
            "p95_ms": 1000 * summary["latency_p95_s"], "p99_ms": 1000 * summary["latency_p99_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256, 1024, 4096])
    parser.add_argument("--rollouts", type=int, default=4000, help="per run (at least 2 x concurrency)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per concurrency; the median is reported")
    args = parser.parse_args()

    specs = load_serve_config(CONFIG)
    serving.connect("local")
    serving.deploy(specs, source=str(CONFIG))
    rows = ROWS.read_text().splitlines()
    work = Path(tempfile.mkdtemp(prefix="gym-serve-bench-"))
    results = []
    for concurrency in args.concurrency:
        n = max(args.rollouts, 2 * concurrency)
        source = work / f"in-{n}.jsonl"
        source.write_text("\n".join(rows[i % len(rows)] for i in range(n)) + "\n")
        run_once(source, work / "warm.jsonl", concurrency)
        runs = [run_once(source, work / "out.jsonl", concurrency) for _ in range(args.repeats)]
        best = sorted(runs, key=lambda r: r["rollouts_per_s"])[len(runs) // 2]
        ideal_latency_s = min(r["p50_ms"] for r in runs) / 1000 if concurrency == 1 else None
        results.append({"concurrency": concurrency, "median": best, "runs": runs, "ideal_latency_s": ideal_latency_s})
        print(f"concurrency {concurrency:>5}: {best['rollouts_per_s']:7.1f} rollouts/s, "
              f"{best['cpu_ms_per_rollout']:.2f} CPU-ms/rollout", flush=True)
    ray.shutdown()

    base = next((r["ideal_latency_s"] for r in results if r["ideal_latency_s"]), None)
    for r in results:  # Little's law: in-flight / latency is what an ideal system would do
        r["littles_law_efficiency"] = (r["median"]["rollouts_per_s"] / (r["concurrency"] / base)) if base else None
    stamp = datetime.now()
    load = os.getloadavg()
    document = {"benchmark": "throughput", "date": stamp.isoformat(timespec="seconds"),
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {psutil.virtual_memory().total >> 30} GiB",
                "load_average_at_end": load, "workload": "example_single_tool_call, replay model", "results": results}
    out = Path(__file__).parent / "results" / f"throughput-{stamp:%Y%m%d-%H%M%S}"
    out.with_suffix(".json").write_text(json.dumps(document, indent=2))
    _plot(results, out.with_suffix(".png"))
    print(f"\n{'concurrency':>11} {'rollouts/s':>10} {'CPU-ms/rollout':>14} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
          f"{'Little eff.':>11}")
    for r in results:
        m = r["median"]
        eff = f"{r['littles_law_efficiency']:.2f}" if r["littles_law_efficiency"] is not None else "-"
        print(f"{r['concurrency']:>11} {m['rollouts_per_s']:>10.1f} {m['cpu_ms_per_rollout']:>14.2f} "
              f"{m['p50_ms']:>8.1f} {m['p95_ms']:>8.1f} {m['p99_ms']:>8.1f} {eff:>11}")
    print(f"(median of {args.repeats}; load average {load[0]:.2f}) -> {out}.json, .png")


def _plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(7, 4))
    xs = [r["concurrency"] for r in results]
    left.plot(xs, [r["median"]["rollouts_per_s"] for r in results], "o-", label="rollouts/s")
    left.set_xscale("log", base=2)
    left.set_xlabel("rollouts in flight (driver concurrency)")
    left.set_ylabel("rollouts/s")
    right = left.twinx()
    right.plot(xs, [r["median"]["cpu_ms_per_rollout"] for r in results], "s--", color="#c44e52", label="CPU-ms")
    right.set_ylabel("CPU-ms per rollout")
    left.set_title("weather task, replay model: throughput vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
