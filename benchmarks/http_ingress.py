"""HTTP ingress: rollouts/s through `POST /v1/rollouts` (NDJSON over a real socket) vs the in-process driver.

The same workload both ways: the weather task with the instant replay model,
`--rollouts` rollouts with `--in-flight` in flight. Over HTTP, the Ray-free
client (`gym_serve.client.GymClient`) sends batches of 64 rows to the ingress
deployment behind Serve's HTTP proxy on loopback and reads rollouts back as
they finish; in-process, a `RolloutDriver` actor calls the agent through
handles. The gap is what HTTP, the proxy, JSON and the ingress deployment cost.

    python benchmarks/http_ingress.py [--rollouts 3000] [--in-flight 256] [--repeats 3]

Prints a table last; writes benchmarks/results/http_ingress-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import ray

from gym_serve.client import GymClient
from gym_serve.serving import deploy as serving
from gym_serve.serving.config import AppSpec

APP = "weather"
BATCH = 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def over_http(url: str, rows: list[dict[str, Any]], in_flight: int) -> tuple[int, int]:
    done = failed = 0
    async with GymClient(url, max_in_flight=max(1, in_flight // BATCH)) as client:
        async for result in client.rollouts(rows, batch_size=BATCH):
            done += 1
            failed += "_ng_failure_class" in result
    return done, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    port = free_port()
    serving.connect("local")
    ingress = {
        "name": "ingress",
        "route_prefix": "/",
        "import_path": "gym_serve.deployments.ingress:build_ingress",
        "args": {"agents": [APP], "default_agent": APP},
    }
    app = harness.weather_app(APP, model={"kind": "replay"}, env_name="example_single_tool_call")
    serving.deploy(
        [AppSpec.model_validate(a) for a in (app, ingress)], source="<benchmark>", http=True, http_port=port
    )
    work = Path(tempfile.mkdtemp(prefix="gym-serve-http-"))
    # distinct tasks (identical rows would be one task with many rollouts, sent as one request)
    rows = [
        {**json.loads(line), "id": i}
        for i, line in enumerate(harness.rows_file(work / "in.jsonl", args.rollouts).read_text().splitlines())
    ]
    source = work / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    url = f"http://127.0.0.1:{port}"

    asyncio.run(over_http(url, rows[: 2 * BATCH], args.in_flight))  # warm up
    runs: dict[str, list[dict[str, float]]] = {"http": [], "driver": []}
    for _ in range(args.repeats):
        cpu = harness.cpu_times()
        started = time.perf_counter()
        done, failed = asyncio.run(over_http(url, rows, args.in_flight))
        seconds = time.perf_counter() - started
        runs["http"].append(
            {
                "rollouts": done,
                "failures": failed,
                "rollouts_per_s": done / seconds,
                "cpu_ms_per_rollout": 1000 * harness.cpu_since(cpu) / done,
            }
        )
        summary, _ = harness.collect(
            {
                "input_path": str(source),
                "output_path": str(work / "out.jsonl"),
                "agents": [APP],
                "default_agent": APP,
                "concurrency": args.in_flight,
            }
        )
        runs["driver"].append(
            {
                "rollouts": summary["rollouts"],
                "failures": summary["failures"],
                "rollouts_per_s": summary["rollouts_per_s"],
                "cpu_ms_per_rollout": 1000 * summary["cpu_s"] / summary["rollouts"],
            }
        )
        print(
            f"http {runs['http'][-1]['rollouts_per_s']:.1f}/s, driver {runs['driver'][-1]['rollouts_per_s']:.1f}/s",
            flush=True,
        )
    ray.shutdown()

    medians = {
        path: {k: statistics.median(r[k] for r in results) for k in results[0]} for path, results in runs.items()
    }
    base = harness.write_result(
        "http_ingress", {"rollouts": args.rollouts, "in_flight": args.in_flight, "medians": medians, "runs": runs}
    )
    print(
        "\n"
        + harness.table(
            ["path", "rollouts", "failures", "rollouts/s", "CPU-ms/rollout"],
            [
                [path, m["rollouts"], m["failures"], m["rollouts_per_s"], m["cpu_ms_per_rollout"]]
                for path, m in medians.items()
            ],
        )
    )
    print(
        f"HTTP / in-process: {medians['http']['rollouts_per_s'] / medians['driver']['rollouts_per_s']:.2f} "
        f"(median of {args.repeats}) -> {base}.json"
    )


if __name__ == "__main__":
    main()
