"""The token-capture gateway's cost: CPU-ms per model call through a session, beside the Agent's own call.

Two paths to the same Model tier (`kind: openai` on the instant OpenAI-compatible server, its own process,
its CPU counted apart), at each number of concurrent sessions, every session making `--calls` calls one
after another:

- `gateway`: a harness's call — HTTP to its session on a Gateway replica (aiohttp from this process, one
  connection pool), the replica forwarding to the Model tier through its micro-batched handle client. The
  sessions are opened and closed as the harness Agent does it (`gym_serve.calls.gateway.GatewayHandle`,
  micro-batched), inside the measured window: their cost is part of the calls';
- `agent`: the tool-loop Agent's own call — the same handle client (`gym_serve.calls.handles.ModelHandle`),
  from this process.

CPU is summed over this process and every process of its Ray instance (`benchmarks.harness.cpu_times`),
the instant server's taken out; the gateway's overhead per call is the difference of the two. The instance's
idle CPU rate, measured over `--idle-s` with no call in flight, lands on each window in proportion to its
length, so the slower path is charged more of it: each row also gives its CPU with that taken out
(`idle out`), and the overhead of those. Targets
(issue 26): at most 1 CPU-ms of overhead per call at 64 sessions and above; 1,024 sessions with 0 failed
calls. Writes `results/gateway-<date>.json` and a PNG; the table is the last thing printed.

    python benchmarks/gateway.py                                  # 1, 64 and 1,024 sessions, 20 calls each
    python benchmarks/gateway.py --sessions 1 8 --calls 5         # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from ray import serve

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (benchmarks/harness.py, beside this file)

from gym_serve.calls.gateway import GATEWAY, GatewayHandle  # noqa: E402
from gym_serve.calls.handles import ModelHandle  # noqa: E402
from gym_serve.rollout.gateway_session import SessionSpec  # noqa: E402
from gym_serve.serving.config import BUILDER  # noqa: E402
from gym_serve.testing.instant_openai_server import start_instant_server  # noqa: E402

MODEL_APP, HARNESS_APP = "gateway_bench_model", "gateway_bench"
QUESTION = "What's the weather like in Paris today?"
UNBOUNDED = {"max_calls_per_s": 1e6, "burst": 1_000_000, "max_concurrent_calls": 64}


def apps(base_url: str) -> list[dict[str, Any]]:
    model = {"kind": "openai", "base_url": base_url, "model": "instant", "api": "chat", "api_key": "sk-instant"}
    agent = {"kind": "harness", "callable": "examples.openai_agents_harness:chat_completions", "gateway": UNBOUNDED}
    return [
        {"name": MODEL_APP, "import_path": BUILDER, "args": {"model": {**model, "deployment": harness.ZERO_CPU}}},
        {
            "name": HARNESS_APP,
            "import_path": BUILDER,
            "args": {
                "environment": {"name": "example_single_tool_call", "deployment": harness.ZERO_CPU},
                "agent": {**agent, "deployment": harness.ZERO_CPU, "gateway_deployment": harness.ZERO_CPU},
                "model": {"kind": "app", "app": MODEL_APP},
            },
        },
    ]


async def through_gateway(sessions: int, calls: int) -> tuple[list[float], int]:
    """Each of `sessions` sessions makes `calls` Chat Completions calls in turn; (latencies, failed calls)."""
    gateway = GatewayHandle(serve.get_deployment_handle(GATEWAY, app_name=HARNESS_APP))
    addresses = await asyncio.gather(*(gateway.open(SessionSpec(model="policy")) for _ in range(sessions)))
    body = {"model": "policy", "messages": [{"role": "user", "content": QUESTION}]}
    latencies: list[float] = []
    failed = 0

    async def one(client: aiohttp.ClientSession, address: Any) -> None:
        nonlocal failed
        url, headers = f"{address.prefix()}/v1/chat/completions", {"Authorization": f"Bearer {address.key}"}
        for _ in range(calls):
            started = time.perf_counter()
            async with client.post(url, json=body, headers=headers) as response:
                await response.read()
                failed += response.status != 200
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as client:
        await asyncio.gather(*(one(client, address) for address in addresses))
    await asyncio.gather(*(gateway.close(address) for address in addresses))
    return latencies, failed


async def through_handle(sessions: int, calls: int) -> tuple[list[float], int]:
    """The Agent's own calls: `sessions` rollouts, each `calls` calls in turn, through the handle client."""
    model = ModelHandle(serve.get_deployment_handle("Model", app_name=MODEL_APP), affinity=False)
    request = {"model": "policy", "input": [{"role": "user", "content": QUESTION}]}
    latencies: list[float] = []
    failed = 0

    async def one(session: str) -> None:
        nonlocal failed
        for _ in range(calls):
            started = time.perf_counter()
            try:
                await model.responses(request, session)
            except Exception:  # noqa: BLE001 (a failed call is counted, the run goes on)
                failed += 1
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(one(f"rollout-{i}") for i in range(sessions)))
    return latencies, failed


def idle_cpu_per_s(seconds: float) -> float:
    """CPU seconds per second the Ray instance and this process spend with no call in flight (the Serve
    controller, GCS, replicas' metrics and status polls): work either path's window holds in proportion to its
    length, whatever it runs, so the longer path would be charged more of it."""
    before = harness.cpu_times()
    time.sleep(seconds)
    return harness.cpu_since(before) / seconds


def measure(path: str, sessions: int, calls: int, server: psutil.Process, idle: float = 0.0) -> dict[str, Any]:
    """One path's run; `idle` (CPU-s per s, `idle_cpu_per_s`) is taken out of `idle_out_cpu_ms_per_call`."""
    run = through_gateway if path == "gateway" else through_handle
    before, server_before = harness.cpu_times(), _cpu(server)
    started = time.perf_counter()
    latencies, failed = asyncio.run(run(sessions, calls))
    seconds = time.perf_counter() - started
    cpu_s = harness.cpu_since(before) - (_cpu(server) - server_before)
    done = len(latencies)
    ordered = sorted(latencies)
    return {
        "path": path,
        "sessions": sessions,
        "calls": done,
        "failed_calls": failed,
        "seconds": seconds,
        "calls_per_s": done / seconds,
        "cpu_ms_per_call": 1000 * cpu_s / max(done, 1),
        "idle_out_cpu_ms_per_call": 1000 * (cpu_s - idle * seconds) / max(done, 1),
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(done - 1, int(0.99 * done))],
    }


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--calls", type=int, default=20, help="calls per session, one after another")
    parser.add_argument("--idle-s", type=float, default=5.0, help="seconds of no calls to measure idle CPU over")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    base_url, process = start_instant_server()
    server = psutil.Process(process.pid)
    results: list[dict[str, Any]] = []
    try:
        harness.start()
        harness.deploy(*apps(base_url))
        measure("gateway", 2, 2, server)  # warm both paths (connections, batchers) before measuring
        measure("agent", 2, 2, server)
        idle = idle_cpu_per_s(args.idle_s)
        print(f"idle: {1000 * idle:.0f} CPU-ms per second", flush=True)
        for sessions in args.sessions:
            for path in ("agent", "gateway"):
                results.append(measure(path, sessions, args.calls, server, idle))
                print(results[-1], flush=True)
    finally:
        serve.shutdown()
        process.terminate()
        process.wait(timeout=10)
    overhead, idle_out = gateway_less_agent(results, "cpu_ms_per_call"), gateway_less_agent(results, IDLE_OUT)
    base = harness.write_result(
        "gateway",
        {"calls_per_session": args.calls, "load_average_at_start": load_at_start, "results": results,
         "idle_cpu_ms_per_s": 1000 * idle, "gateway_overhead_cpu_ms_per_call": overhead,
         "gateway_overhead_idle_out_cpu_ms_per_call": idle_out},
    )  # fmt: skip
    plot(results, base.with_suffix(".png"))
    rows = [
        [r["path"], r["sessions"], r["calls"], r["failed_calls"], r["calls_per_s"], r["cpu_ms_per_call"],
         overhead.get(r["sessions"]) if r["path"] == "gateway" else None, r[IDLE_OUT],
         idle_out.get(r["sessions"]) if r["path"] == "gateway" else None, r["p50_ms"], r["p99_ms"]]
        for r in results
    ]  # fmt: skip
    headers = ["path", "sessions", "calls", "failed", "calls/s", "CPU-ms/call", "overhead"]
    headers += ["idle out", "overhead, idle out", "p50 ms", "p99 ms"]
    print(f"\n{base}.json\n" + harness.table(headers, rows))


IDLE_OUT = "idle_out_cpu_ms_per_call"


def gateway_less_agent(results: list[dict[str, Any]], field: str) -> dict[int, float]:
    """The gateway's `field` less the Agent's, by number of sessions: the overhead per call."""
    agent = {r["sessions"]: r[field] for r in results if r["path"] == "agent"}
    return {r["sessions"]: r[field] - agent[r["sessions"]] for r in results if r["path"] == "gateway"}


def plot(results: list[dict[str, Any]], path: Path) -> None:
    plt = harness.pyplot()
    figure, (cpu, latency) = plt.subplots(1, 2, figsize=(11, 4))
    for name in ("agent", "gateway"):
        mine = [r for r in results if r["path"] == name]
        sessions = [r["sessions"] for r in mine]
        cpu.plot(sessions, [r["cpu_ms_per_call"] for r in mine], marker="o", label=name)
        latency.plot(sessions, [r["p50_ms"] for r in mine], marker="o", label=f"{name} p50")
        latency.plot(sessions, [r["p99_ms"] for r in mine], marker="x", linestyle="--", label=f"{name} p99")
    for axis, label in ((cpu, "CPU-ms per call"), (latency, "latency (ms)")):
        axis.set_xscale("log")
        axis.set_xlabel("concurrent sessions")
        axis.set_ylabel(label)
        axis.legend()
    figure.suptitle("A model call through the gateway vs the Agent's own (instant model)")
    figure.tight_layout()
    figure.savefig(path)


if __name__ == "__main__":
    main()
