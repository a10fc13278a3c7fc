"""Overload: the HTTP ingress at 10× its capacity for 60 s, then back to its capacity.

The weather task on the synthetic model (`--latency` seconds per model call, two calls a rollout) behind the
ingress with `--slots` rollouts in flight; `POST /run`, one rollout per request. First as many closed-loop
clients as there are slots (the capacity, and the latency of a taken request), then requests arriving
open-loop at `--factor` × that rate for `--seconds`, then the closed-loop clients again
(`gym_serve.testing.overload`). What must hold: no 5xx; every refusal a 429 with `Retry-After`; the taken
requests' p99 within 2× the one at capacity; the ingress replica's memory flat; every slot taken again
(the ingress at capacity) within 5 s after.

    python benchmarks/overload.py [--slots 16] [--latency 0.5] [--factor 10] [--seconds 60]

Exits 1 if one of those broke. Prints a table last and writes benchmarks/results/overload-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import harness
import ray
from ray import serve

from gym_serve.deployments.ingress.api import build_ingress
from gym_serve.testing.fixtures import example_rows
from gym_serve.testing.overload import OverloadReport, memory_growth, overload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=16, help="the ingress's rollouts in flight (max_in_flight)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per model call (two per rollout)")
    parser.add_argument("--factor", type=float, default=10.0, help="offered load, in multiples of capacity")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the overload lasts")
    args = parser.parse_args()

    port = harness.start_with_http()
    model = {"kind": "synthetic", "latency": {"mean_s": args.latency}}
    harness.deploy(harness.weather_app("weather", model=model, env_name="example_single_tool_call"))
    ingress = {"agents": ["weather"], "default_agent": "weather", "max_in_flight": args.slots}
    ingress["token_env"] = "GYM_SERVE_OVERLOAD_NO_TOKEN"
    serve.run(build_ingress(ingress), name="ingress", route_prefix="/")
    row = example_rows("example_single_tool_call")[0]
    report = asyncio.run(
        overload(f"http://127.0.0.1:{port}", row, slots=args.slots, factor=args.factor, seconds=args.seconds)
    )
    serve.shutdown()
    ray.shutdown()

    base = harness.write_result("overload", {"latency_s": args.latency, **report.model_dump()})
    plot(report, base.with_suffix(".png"))
    print("\n" + summary(report))
    print(f"-> {base}.json, .png")
    sys.exit(1 if report.problems else 0)


def summary(report: OverloadReport) -> str:
    ms = lambda v: f"{1000 * v:.0f} ms" if v is not None else "-"  # noqa: E731
    burst, capacity = report.overload, report.capacity
    rss = [mb for _, mb in report.rss_mb]
    rows = [
        (
            "capacity",
            f"{capacity.rate:.1f} rollouts/s with {report.slots} in flight; p50 {ms(capacity.p50_s)}, "
            f"p99 {ms(capacity.p99_s)}",
        ),
        (
            "offered",
            f"{report.offered_per_s:.0f} requests/s ({report.factor:g}×) for {burst.seconds:.0f} s: "
            f"{burst.requests} requests",
        ),
        ("taken", f"{burst.taken} ({burst.rate:.1f}/s); p50 {ms(burst.p50_s)}, p99 {ms(burst.p99_s)}"),
        ("refused", f"{report.refused_with_retry_after} with 429 + Retry-After, {report.refused_without} otherwise"),
        ("5xx or no answer", report.server_errors),
        (
            "ingress memory",
            f"{rss[0]:.0f} → {rss[-1]:.0f} MB (max {max(rss):.0f}; {memory_growth(report.rss_mb):+.0f} MB after "
            "the first quarter)"
            if rss
            else "-",
        ),
        (
            "CPU in the burst",
            ", ".join(
                f"{name} {s:.1f} s ({1000 * s / max(burst.requests, 1):.1f} ms/request)"
                for name, s in list(report.cpu_s.items())[:4]
            ),
        ),
        (
            "after the burst",
            f"every slot taken again after {report.recovered_after_s} s; taken per second: "
            f"{', '.join(f'{r:.0f}' for r in report.recovery_per_s)}",
        ),
    ]
    return harness.checklist(rows, report.problems, ok="all held")


def plot(report: OverloadReport, path: Path) -> None:
    plt = harness.pyplot()
    fig, (rates, memory) = plt.subplots(1, 2, figsize=(12, 4))
    seconds = range(len(report.taken_per_s))
    rates.plot(seconds, report.taken_per_s, label="taken (200)")
    rates.plot(seconds, report.refused_per_s, label="refused (429)")
    rates.axhline(report.capacity.rate, linestyle="--", color="gray", label="capacity")
    rates.set_xlabel("seconds of overload")
    rates.set_ylabel("requests/s")
    rates.legend()
    rates.set_title(f"{report.factor:g}× capacity: p99 of taken requests {report.overload.p99_s or 0:.2f} s")
    memory.plot([t for t, _ in report.rss_mb], [mb for _, mb in report.rss_mb])
    memory.set_xlabel("seconds of overload")
    memory.set_ylabel("ingress replica RSS (MB)")
    memory.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
