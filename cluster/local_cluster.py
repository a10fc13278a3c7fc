"""A multi-node Ray cluster on one machine: the N-node design, run where you are.

Starts a head node and `--nodes` worker nodes (real raylets, one per node, via
`ray.cluster_utils.Cluster`), deploys a Serve config (Serve spreads replicas
over the nodes), and runs one `RolloutDriver` per worker node on its own shard
of the input (`shard_index`/`shard_count`), each driver pinned to its node.
That is how a collection scales out: tiers by replicas, the driver by shards,
no shared state but the rows. It prints where the replicas landed and the
rollouts/s of the sharded collection.

    python cluster/local_cluster.py [--nodes 2] [--config deployments/example_single_tool_call.yaml]
                                    [--input envs/example_single_tool_call/data/example.jsonl] [--repeats 200]

On a real cluster the same happens with `ray start` on each machine (see
cluster/README.md) and one `gym-serve collect --address auto --shard I/N` per node.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gym_serve.collect.driver import RolloutDriver
from gym_serve.collect.job import CollectJob
from gym_serve.serving import deploy as serving
from gym_serve.serving.config import load_serve_config

REPO = Path(__file__).resolve().parents[1]


def start(nodes: int, cpus_per_node: int) -> Cluster:
    """A head (no CPUs of its own: it runs only Ray's and Serve's control plane) and `nodes` worker nodes."""
    # a free dashboard port: another Ray instance on this machine may hold the default one (8265)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "dashboard_port": _free_port()})
    for _ in range(nodes):
        cluster.add_node(num_cpus=cpus_per_node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def replica_nodes() -> dict[str, Counter[str]]:
    """Deployment → node id → replicas, from the actors Serve started."""
    from ray.util.state import list_actors

    placed: dict[str, Counter[str]] = {}
    for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000):
        name = actor.class_name or ""
        if name.startswith("ServeReplica:"):
            deployment = name.split(":", 1)[1]
            placed.setdefault(deployment, Counter())[actor.node_id[:8]] += 1
    return placed


def sharded_collect(
    config: str, source: Path, repeats: int, out: Path, in_flight: int | None = None
) -> dict[str, Any]:
    specs = load_serve_config(config)
    agents = serving.env_apps(specs)
    workers = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]
    jobs = [
        {
            "input_path": str(source),
            "output_path": str(out / f"shard{i}.jsonl"),
            "agents": agents,
            "default_agent": agents[0],
            "num_repeats": repeats,
            "concurrency": -(-in_flight // len(workers)) if in_flight else 256,
            "shard_index": i,
            "shard_count": len(workers),
        }
        for i in range(len(workers))
    ]
    drivers = [
        RolloutDriver.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for node in workers
    ]
    started = time.perf_counter()
    summaries = [
        s.model_dump()
        for s in ray.get(
            [d.collect.remote(CollectJob.model_validate(job)) for d, job in zip(drivers, jobs, strict=True)]
        )
    ]
    elapsed = time.perf_counter() - started
    rollouts = sum(s["rollouts"] for s in summaries)
    return {
        "shards": len(workers),
        "rollouts": rollouts,
        "failures": sum(s["failures"] for s in summaries),
        "rollouts_per_shard": [s["rollouts"] for s in summaries],
        "rollouts_per_s": rollouts / elapsed,
        "latency_p50_s": [s["latency_p50_s"] for s in summaries],
        "driver_rss_mb": [s["driver_rss_mb"] for s in summaries],
        "outputs": [s["output_path"] for s in summaries],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=int, default=2, help="logical CPUs per worker node")
    parser.add_argument("--config", default=str(REPO / "deployments" / "example_single_tool_call.yaml"))
    parser.add_argument("--input", default=str(REPO / "envs" / "example_single_tool_call" / "data" / "example.jsonl"))
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--in-flight", type=int, help="rollouts in flight in all, split over the drivers (256 each)")
    parser.add_argument("--out", help="folder for the shard outputs (default: a temporary one)")
    args = parser.parse_args(argv)

    cluster = start(args.nodes, args.cpus_per_node)
    try:
        specs = load_serve_config(args.config)
        serving.deploy(specs, source=args.config)
        out = Path(args.out or tempfile.mkdtemp(prefix="gym-serve-cluster-"))
        out.mkdir(parents=True, exist_ok=True)
        result = sharded_collect(args.config, Path(args.input), args.repeats, out, args.in_flight)
        result["replica_nodes"] = {d: dict(c) for d, c in replica_nodes().items()}
        result["nodes"] = args.nodes
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    print(f"{args.nodes} worker nodes (+ head); replicas per node:")
    for deployment, nodes in sorted(result["replica_nodes"].items()):
        print(f"  {deployment:<45} {nodes}")
    print(
        f"{result['shards']} drivers, one per node: {result['rollouts']} rollouts "
        f"({result['rollouts_per_shard']} per shard), {result['failures']} failures, "
        f"{result['rollouts_per_s']:.1f} rollouts/s; p50 latency per shard {result['latency_p50_s']} s, "
        f"driver RSS per shard {result['driver_rss_mb']} MB"
    )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
