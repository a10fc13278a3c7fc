"""Workspace sandboxes: operation latency, how many this machine holds, the SWE environment's rollouts/s, leaks.

    python benchmarks/sandbox.py [--samples 100] [--live 256] [--rollouts 256] [--in-flight 1 16 64]

1. Latency, p50/p99 over `--samples` each, of a provider in this process (`gym_serve.sandbox.LocalProvider`, the
   sandboxes' own cost) and of the same operations through a Sandbox tier replica's handle: a cold create (no warm
   pool), a create from the warm pool (the pool refilled before each), `fork(1)` of a sandbox that changed a
   file, `exec("true")`, and `destroy`.
2. Capacity: `--live` idle sandboxes held at once (each warm-created, then one `exec` in each to show it answers);
   memory per sandbox as the machine counts it (used memory before and after, over the count) and as the
   sandboxes' processes count it (their proportional set size, PSS).
3. The `swe_fix` environment through Serve (Agent, Environment, replay Model, Sandbox tier): rollouts/s of
   `--rollouts` rollouts of its tasks (the replay model plays its recordings: some solve their task, some fail)
   at each `--in-flight`.
4. Leaks: a collection of `swe_fix` during which the Sandbox replica and an Agent replica are killed mid-rollout
   (`ray.kill`); after it ends (the lost rollouts retried), then after the applications are deleted: the killed
   replica's processes and mounts, every sandbox process of the applications, and their cgroups, each of which
   must be 0.

Prints a table and writes `results/sandbox-<date>.json` and a PNG. Timings on a shared or loaded machine are
indicative only: the JSON records the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import ray
from harness import ZERO_CPU, collect, deploy, pyplot, start, table, write_result
from ray import serve

from gym_serve.calls.routing import session_router_config
from gym_serve.calls.sandboxes import SandboxTierClient
from gym_serve.deployments.sandbox import SandboxDeployment
from gym_serve.envs.swe_fix import SweFix
from gym_serve.sandbox import Base, BaseFile, Limits, LocalProvider, SandboxProvider
from gym_serve.serving.config import SandboxArgs

BASE = Base(files=(BaseFile(dest="repo/app.py", text="print('hello')\n"),), name="bench")
LIMITS = Limits(disk_mb=64, max_files=10_000, memory_mb=512)
TASKS = SweFix.data_dir() / "tasks.jsonl"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "n": len(ordered),
    }


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await call()
    return time.perf_counter() - started, result


async def latencies(
    provider: SandboxProvider, samples: int, warm_pool: Callable[[], Awaitable[None]]
) -> dict[str, Any]:
    """Each operation `samples` times; `warm_pool()` waits until the provider's warm pool is full again."""
    found: dict[str, list[float]] = {"create_warm": [], "fork": [], "exec_true": [], "destroy": []}
    for _ in range(samples):
        await warm_pool()
        seconds, sandbox = await timed(lambda: provider.create(BASE, limits=LIMITS))
        found["create_warm"].append(seconds)
        found["exec_true"].append((await timed(lambda: provider.exec(sandbox, "true")))[0])  # noqa: B023
        await provider.exec(sandbox, "echo changed > repo/app.py")
        await warm_pool()
        seconds, children = await timed(lambda: provider.fork(sandbox, 1))  # noqa: B023
        found["fork"].append(seconds)
        for child in [sandbox, *children]:
            found["destroy"].append((await timed(lambda: provider.destroy(child)))[0])  # noqa: B023
    return {name: percentiles(values) for name, values in found.items()}


async def cold_creates(samples: int) -> dict[str, float]:
    async with LocalProvider(warm=0) as provider:
        await provider.destroy(await provider.create(BASE, limits=LIMITS))  # the base built, the keeper up
        seconds = []
        for _ in range(samples):
            took, sandbox = await timed(lambda: provider.create(BASE, limits=LIMITS))
            seconds.append(took)
            await provider.destroy(sandbox)
    return percentiles(seconds)


async def in_process(samples: int) -> dict[str, Any]:
    async with LocalProvider(warm=2, max_sandboxes=1024) as provider:
        await provider.destroy(await provider.create(BASE, limits=LIMITS))

        async def full() -> None:
            while provider.warm_count < 2:
                await asyncio.sleep(0.005)

        found = await latencies(provider, samples, full)
    return {"create_cold": await cold_creates(max(5, samples // 4)), **found}


async def through_serve(samples: int) -> dict[str, Any]:
    options = {**ZERO_CPU, "num_replicas": 1, "request_router_config": session_router_config()}
    app = SandboxDeployment.options(**options).bind(SandboxArgs(warm=2, max_sandboxes=1024))
    handle = serve.run(app, name="bench-sandbox", route_prefix=None)
    client = SandboxTierClient(handle)
    await client.destroy(await client.create(BASE, limits=LIMITS))

    async def full() -> None:
        while (await handle.stats.remote())["warm"] < 2:
            await asyncio.sleep(0.005)

    try:
        return await latencies(client, samples, full)
    finally:
        serve.delete("bench-sandbox")


def sandbox_memory(tag: str) -> tuple[float, int]:
    """PSS (MB) summed over the processes whose command line holds the provider's tag, and their count."""
    total, count = 0, 0
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(tag in part for part in proc.info["cmdline"] or []):
                total += proc.memory_full_info().pss
                count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / 2**20, count


async def capacity(live: int) -> dict[str, Any]:
    used_before = psutil.virtual_memory().used
    async with LocalProvider(warm=4, max_sandboxes=live + 16) as provider:
        held, failure = [], None
        started = time.perf_counter()
        try:
            for _ in range(live):
                held.append(await provider.create(BASE, limits=LIMITS))
        except Exception as e:  # noqa: BLE001 - how many it held before the first refusal is the measurement
            failure = f"{type(e).__name__}: {e}"
        answered = sum(r.stdout == "ok\n" for r in await asyncio.gather(*(provider.exec(s, "echo ok") for s in held)))
        await asyncio.sleep(1.0)
        pss_mb, processes = await asyncio.to_thread(sandbox_memory, provider.tag)
        used_mb = (psutil.virtual_memory().used - used_before) / 2**20
        seconds = time.perf_counter() - started
    return {
        "asked": live,
        "held": len(held),
        "answered": answered,
        "first_failure": failure,
        "processes": processes,
        "machine_used_mb": used_mb,
        "machine_mb_per_sandbox": used_mb / max(1, len(held) + provider.warm),
        "pss_mb": pss_mb,
        "pss_mb_per_sandbox": pss_mb / max(1, len(held) + provider.warm),
        "create_all_s": seconds,
    }


def swe_app(name: str, sandbox: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "import_path": "gym_serve.deployments.app:build_app",
        "route_prefix": None,
        "args": {
            "environment": {"name": "swe_fix", "deployment": {**ZERO_CPU, "num_replicas": 2}},
            "agent": {"max_steps": 8, "deployment": {**ZERO_CPU, "num_replicas": 2}},
            "model": {"kind": "replay", "recordings": ["swe_fix"], "deployment": ZERO_CPU},
            "sandbox": {"warm": 4, "deployment": {**ZERO_CPU, "num_replicas": 1}, **(sandbox or {})},
        },
    }


def tasks_file(folder: Path, n: int) -> Path:
    rows = TASKS.read_text().splitlines()
    path = folder / f"swe-{n}.jsonl"
    path.write_text("".join(rows[i % len(rows)] + "\n" for i in range(n)))
    return path


def rollouts_per_second(folder: Path, rollouts: int, in_flight: list[int]) -> list[dict[str, Any]]:
    deploy(swe_app("bench-swe"))
    found = []
    try:
        for concurrency in in_flight:
            job = {
                "input_path": str(tasks_file(folder, rollouts)),
                "output_path": str(folder / f"swe-out-{concurrency}.jsonl"),
                "agents": ["bench-swe"],
                "default_agent": "bench-swe",
                "concurrency": concurrency,
            }
            started = time.perf_counter()
            summary, _ = collect(job)
            seconds = time.perf_counter() - started
            rows = [json.loads(line) for line in Path(job["output_path"]).read_text().splitlines()]
            found.append(
                {
                    "in_flight": concurrency,
                    "rollouts": summary["rollouts"],
                    "failures": summary["failures"],
                    "rollouts_per_s": summary["rollouts"] / seconds,
                    "mean_reward": statistics.fmean(r["reward"] for r in rows) if rows else None,
                    "cpu_s": summary["cpu_s"],
                }
            )
    finally:
        serve.delete("bench-swe")
    return found


def replica_actor(app: str, deployment: str) -> str:
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    return next(n for n in names if n.startswith(f"SERVE_REPLICA::{app}#{deployment}#"))


def count_left(tags: list[str], mounts_before: set[str]) -> dict[str, int]:
    processes = [
        p for p in psutil.process_iter(["cmdline"]) if any(t in " ".join(p.info["cmdline"] or []) for t in tags)
    ]
    root = Path("/sys/fs/cgroup")
    cgroups = [p for t in tags for p in root.rglob(f"gym-serve-sandboxes-*-{t}")] if root.is_dir() else []
    mounts = set(Path("/proc/mounts").read_text().splitlines()) - mounts_before
    return {"processes": len(processes), "cgroups": len(cgroups), "mounts": len(mounts)}


def leaks(folder: Path, rollouts: int) -> dict[str, Any]:
    """Kill the Sandbox replica and an Agent replica mid-collection; count what is left after, and after delete."""
    mounts_before = set(Path("/proc/mounts").read_text().splitlines())
    deploy(swe_app("bench-leaks"))
    sandbox = serve.get_deployment_handle("Sandbox", app_name="bench-leaks")
    tags = [sandbox.stats.remote().result()["tag"]]
    job = {
        "input_path": str(tasks_file(folder, rollouts)),
        "output_path": str(folder / "leaks-out.jsonl"),
        "agents": ["bench-leaks"],
        "default_agent": "bench-leaks",
        "concurrency": 16,
        "max_attempts": 6,
    }

    def killer() -> None:
        time.sleep(8.0)
        for deployment in ("Sandbox", "Agent"):
            ray.kill(ray.get_actor(replica_actor("bench-leaks", deployment), namespace="serve"), no_restart=False)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    summary, _ = collect(job)
    thread.join()
    killed_tag = tags[0]
    time.sleep(2.0)
    after_kill = count_left([killed_tag], mounts_before)
    tags.append(sandbox.stats.remote().result()["tag"])  # the replacement replica's provider (its first create swept)
    serve.delete("bench-leaks")
    time.sleep(3.0)
    after_delete = count_left(tags, mounts_before)
    return {
        "rollouts": summary["rollouts"],
        "failures": summary["failures"],
        "killed_replica_left": after_kill,
        "after_delete_left": after_delete,
    }


def plot(base: Path, document: dict[str, Any]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    ops = ["create_cold", "create_warm", "fork", "exec_true", "destroy"]
    local = document["latency"]["in_process"]
    tier = document["latency"].get("serve", {})
    x = range(len(ops))
    left.bar([i - 0.2 for i in x], [local[o]["p50_ms"] for o in ops], 0.4, label="in process, p50")
    left.bar([i + 0.2 for i in x], [tier.get(o, {}).get("p50_ms", 0) for o in ops], 0.4, label="Serve replica, p50")
    left.scatter(list(x), [local[o]["p99_ms"] for o in ops], marker="_", s=300, color="k", label="in process, p99")
    left.set_xticks(list(x), ops)
    left.set_ylabel("ms")
    left.set_title("sandbox operations")
    left.legend()
    rates = document["swe_fix"]
    right.plot([r["in_flight"] for r in rates], [r["rollouts_per_s"] for r in rates], marker="o")
    right.set_xscale("log", base=2)
    right.set_xlabel("rollouts in flight")
    right.set_ylabel("rollouts/s")
    right.set_title("swe_fix, replay model, through Serve")
    fig.tight_layout()
    fig.savefig(base.with_suffix(".png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100, help="timings of each operation")
    parser.add_argument("--live", type=int, default=256, help="sandboxes to hold at once")
    parser.add_argument("--rollouts", type=int, default=256, help="swe_fix rollouts at each in-flight count")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--leak-rollouts", type=int, default=64, help="rollouts of the collection killed into")
    args = parser.parse_args()

    document: dict[str, Any] = {"args": vars(args)}
    document["latency"] = {"in_process": asyncio.run(in_process(args.samples))}
    document["capacity"] = asyncio.run(capacity(args.live))
    start()
    document["latency"]["serve"] = asyncio.run(through_serve(args.samples))
    with tempfile.TemporaryDirectory() as folder:
        document["swe_fix"] = rollouts_per_second(Path(folder), args.rollouts, args.in_flight)
        document["leaks"] = leaks(Path(folder), args.leak_rollouts)
    serve.shutdown()
    ray.shutdown()
    base = write_result("sandbox", document)
    plot(base, document)

    local, tier = document["latency"]["in_process"], document["latency"]["serve"]
    rows = [
        [op, local[op]["p50_ms"], local[op]["p99_ms"], tier.get(op, {}).get("p50_ms"), tier.get(op, {}).get("p99_ms")]
        for op in ["create_cold", "create_warm", "fork", "exec_true", "destroy"]
    ]
    print(table(["operation", "local p50 ms", "local p99 ms", "Serve p50 ms", "Serve p99 ms"], rows))
    cap = document["capacity"]
    print(
        f"\nheld {cap['held']}/{cap['asked']} live sandboxes ({cap['answered']} answered): "
        f"{cap['machine_mb_per_sandbox']:.1f} MB each (machine), {cap['pss_mb_per_sandbox']:.1f} MB (PSS)\n"
    )
    rates = [
        [r["in_flight"], r["rollouts"], r["failures"], r["rollouts_per_s"], r["mean_reward"]]
        for r in document["swe_fix"]
    ]
    print(table(["in flight", "rollouts", "failures", "rollouts/s", "mean reward"], rates))
    leak = document["leaks"]
    print(f"\nleft after killing the Sandbox and an Agent replica: {leak['killed_replica_left']}")
    print(f"left after deleting the applications: {leak['after_delete_left']}")
    print(f"\n{base.with_suffix('.json')}")


if __name__ == "__main__":
    main()
