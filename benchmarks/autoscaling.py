"""Autoscaling: a load ramp against Agent, Environment and Model tiers that each scale on their own.

Two scenarios on the weather task (`synthetic_load` + the synthetic model):

- `slow_verifier`: verification waits 0.5 s on I/O and each Environment replica
  holds 2 at once (a pool of 2 sandboxes): 4 rollouts/s per replica; the model
  is instant. The Environment tier must grow and the Model tier stay put.
- `slow_model`: each model call takes 0.5 s and a Model replica serves 2 at once
  (its batch): 2 rollouts/s per replica (2 calls each); verification is instant.
  The reverse.

The per-replica rates are small on purpose: at 8 replicas the whole system must
stay under this 2-core machine's CPU (a Serve request costs ~5 ms of CPU here,
and calls that trickle in a few at a time cannot be batched much), or the CPU,
not the slow tier, would set the pace.

Each tier has its own `autoscaling_config` (min 1, max 8; the batched tiers
scale on calls in flight, `gym_serve.calls.autoscaling`). Closed-loop clients call the
Agent: the count rises, holds, falls, then stops, while a poller records the
RUNNING replicas of every tier from `serve.status()`. Reported per scenario:
replicas per tier over time, throughput and p50 latency per second, the peak
replicas per tier, and reaction times: load start → first new replica of the
slow tier, → its peak; load end → back to 1.

    python benchmarks/autoscaling.py [--scenarios slow_verifier slow_model] [--hold 30]

Prints a table last; writes benchmarks/results/autoscaling-<date>.json and one PNG per scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import harness
import ray
from ray import serve

TIERS = ("Agent", "Environment", "Model")
AUTOSCALING = {
    "min_replicas": 1,
    "max_replicas": 8,
    "upscale_delay_s": 1.0,
    "downscale_delay_s": 5.0,
    "look_back_period_s": 2.0,
    "metrics_interval_s": 0.5,
}
SLOW_S, PER_REPLICA = 0.5, 2
SCENARIOS: dict[str, dict[str, Any]] = {
    "slow_verifier": {
        "env": {"verify_latency": {"mean_s": SLOW_S}, "max_concurrent_verifications": PER_REPLICA},
        "model": {"kind": "synthetic"},
        "slow_tier": "Environment",
        "slow_calls_per_rollout": 1,
    },
    "slow_model": {
        "env": {},
        "model": {"kind": "synthetic", "latency": {"mean_s": SLOW_S}, "max_concurrency": PER_REPLICA},
        "slow_tier": "Model",
        "slow_calls_per_rollout": 2,
    },
}


def deployment(target: int) -> dict[str, Any]:
    return {"autoscaling_config": {**AUTOSCALING, "target_ongoing_requests": target}}


def ramp(hold_s: float) -> list[tuple[float, int]]:
    """(seconds, clients): rising, steady, falling, then idle long enough to watch the scale-down."""
    return [(8, 2), (8, 8), (8, 24), (hold_s, 48), (8, 16), (8, 4), (45, 0)]


async def drive(app: str, schedule: list[tuple[float, int]], t0: float) -> list[tuple[float, float]]:
    handle = serve.get_app_handle(app)
    rows = [json.loads(line) for line in harness.WEATHER_ROWS.read_text().splitlines()]

    async def call(i: int) -> None:
        await handle.run.remote(rows[i % len(rows)])

    return await harness.closed_loop(call, schedule, t0)


def run_scenario(name: str, hold_s: float) -> dict[str, Any]:
    spec = SCENARIOS[name]
    app = f"autoscale-{name}"
    harness.deploy(
        harness.weather_app(
            app,
            model=spec["model"],
            env=spec["env"],
            # targets in calls in flight per replica: what one slow replica serves at once,
            # and far more for the agent, whose rollouts mostly wait on the other tiers
            env_deployment=deployment(PER_REPLICA),
            model_deployment=deployment(PER_REPLICA),
            agent_deployment=deployment(512),
        )
    )
    schedule = ramp(hold_s)
    poller = harness.Poller(lambda: harness.replicas(app), interval_s=0.5)
    with poller.running():
        finished = asyncio.run(drive(app, schedule, poller.t0))
    serve.delete(app)
    one_replica = PER_REPLICA / SLOW_S / spec["slow_calls_per_rollout"]
    return analyse(name, spec["slow_tier"], one_replica, schedule, poller.samples, finished)


def analyse(
    name: str,
    slow_tier: str,
    one_replica: float,
    schedule: list[tuple[float, int]],
    replicas: list[tuple[float, dict[str, int]]],
    finished: list[tuple[float, float]],
) -> dict[str, Any]:
    """Timelines and the numbers the issue asks for; `one_replica` is one slow replica's rollouts/s."""
    load_end = sum(seconds for seconds, clients in schedule if clients)
    hold_start = sum(seconds for seconds, _ in schedule[:3])
    hold_end = hold_start + schedule[3][0]
    seconds = int(max(t for t, _ in replicas)) + 1
    per_second = [[lat for t, lat in finished if s <= t < s + 1] for s in range(seconds)]
    timeline = {
        "t": [t for t, _ in replicas],
        "replicas": {tier: [r.get(tier, 0) for _, r in replicas] for tier in TIERS},
        "throughput_per_s": [len(b) for b in per_second],
        "p50_latency_ms": [1000 * statistics.median(b) if b else None for b in per_second],
    }
    slow = list(zip(timeline["t"], timeline["replicas"][slow_tier], strict=True))
    peak = max(n for _, n in slow)
    first_up = next((t for t, n in slow if n > 1), None)
    at_peak = next((t for t, n in slow if n == peak), None)
    back_down = next((t for t, n in slow if t > load_end and n == 1), None)
    # the second half of the hold: scaled up, at peak load
    steady = [len(b) for s, b in enumerate(per_second) if (hold_start + hold_end) / 2 <= s < hold_end]
    steady_rate = statistics.mean(steady) if steady else None
    return {
        "scenario": name,
        "slow_tier": slow_tier,
        "schedule": schedule,
        "autoscaling": AUTOSCALING,
        "peak_replicas": {tier: max(timeline["replicas"][tier]) for tier in TIERS},
        "scale_up_first_s": first_up,
        "scale_up_to_peak_s": at_peak,
        "scale_down_after_load_s": (back_down - load_end) if back_down is not None else None,
        "steady_rollouts_per_s": steady_rate,
        "one_replica_rollouts_per_s": one_replica,
        "scaling_efficiency": steady_rate / (peak * one_replica) if steady_rate else None,
        "rollouts": len(finished),
        "timeline": timeline,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    plt = harness.pyplot()
    timeline = result["timeline"]
    fig, (load, reps) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    xs = range(len(timeline["throughput_per_s"]))
    load.plot(xs, timeline["throughput_per_s"], label="rollouts/s")
    clients_t, clients_n, elapsed = [], [], 0.0
    for seconds, clients in result["schedule"]:
        clients_t += [elapsed, elapsed + seconds]
        clients_n += [clients, clients]
        elapsed += seconds
    load.plot(clients_t, clients_n, "--", color="grey", label="clients (rollouts in flight)")
    load.set_ylabel("rollouts/s, clients")
    load.legend(loc="upper right")
    load.set_title(f"{result['scenario']}: {result['slow_tier']} is slow")
    for tier in TIERS:
        reps.step(timeline["t"], timeline["replicas"][tier], where="post", label=tier)
    reps.set_ylabel("RUNNING replicas")
    reps.set_xlabel("seconds")
    reps.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--hold", type=float, default=30.0, help="seconds at peak load")
    args = parser.parse_args()

    harness.start()
    results = []
    for name in args.scenarios:
        started = time.perf_counter()
        results.append(run_scenario(name, args.hold))
        print(f"{name}: peak {results[-1]['peak_replicas']} in {time.perf_counter() - started:.0f} s", flush=True)
    ray.shutdown()

    base = harness.write_result("autoscaling", {"results": results})
    for result in results:
        plot(result, base.with_name(f"{base.name}-{result['scenario']}.png"))
    rows = [
        [
            r["scenario"],
            r["slow_tier"],
            r["peak_replicas"]["Agent"],
            r["peak_replicas"]["Environment"],
            r["peak_replicas"]["Model"],
            r["scale_up_first_s"],
            r["scale_up_to_peak_s"],
            r["scale_down_after_load_s"],
            r["steady_rollouts_per_s"],
            r["one_replica_rollouts_per_s"],
            r["scaling_efficiency"],
        ]
        for r in results
    ]
    print(
        "\n"
        + harness.table(
            [
                "scenario",
                "slow tier",
                "Agent max",
                "Env max",
                "Model max",
                "first up s",
                "peak at s",
                "down after s",
                "steady/s",
                "1 replica/s",
                "efficiency",
            ],
            rows,
        )
    )
    print(f"-> {base}.json, {base.name}-<scenario>.png")


if __name__ == "__main__":
    main()
