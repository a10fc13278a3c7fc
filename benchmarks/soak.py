"""Chaos soak: rollouts of three environments while replicas, the collector and the model keep failing.

A single-turn (multiple choice), a multi-turn tool (weather) and a multi-turn user-simulation (support)
environment on the instant OpenAI-compatible server over HTTP, each tier with two replicas, the ingress in
front (`gym_serve.testing.soak` says what runs and what is checked). The rows run once undisturbed (the
reference rewards, and the quiet rate), then under chaos: a seeded loop kills a replica of each tier
(Agent, Environment, Model, ingress) in turn, `--kill-every` seconds per tier; the collector is SIGKILLed
`--collector-kills` times and resumed; the model server injects 5xx, 429 with Retry-After, hangs past the
client's timeout, dropped connections, malformed bodies and slow answers at the rates given; and a client
streams `--ingress-rollouts` of the rows through the ingress.

    python benchmarks/soak.py [--rollouts 5000] [--ingress-rollouts 500] [--kill-every 8] [--seed 0]

It exits 1 if an invariant broke (a rollout lost or written twice, an untyped failure, a reward that is
not the undisturbed run's, a file that is not JSONL at a kill). Prints a table last and writes
benchmarks/results/soak-<date>.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import harness
import ray
from ray import serve

from gym_serve.testing.faults import KINDS, FaultRates
from gym_serve.testing.soak import SoakConfig, SoakReport, run_soak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5000, help="rollouts through the collector")
    parser.add_argument("--ingress-rollouts", type=int, default=500, help="rollouts through the ingress, alongside")
    parser.add_argument("--concurrency", type=int, default=64, help="the collector's rollouts in flight")
    parser.add_argument("--kill-every", type=float, default=8.0, help="seconds between kills of each tier")
    parser.add_argument("--collector-kills", type=int, default=2)
    parser.add_argument("--faults", default=None, help="fault rates as JSON (default: gym_serve.testing.soak's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    config = SoakConfig(
        rollouts=args.rollouts,
        ingress_rollouts=args.ingress_rollouts,
        concurrency=args.concurrency,
        kill_every_s=args.kill_every,
        collector_kills=args.collector_kills,
        seed=args.seed,
        **({"faults": FaultRates.model_validate_json(args.faults)} if args.faults else {}),
    )
    port = harness.start_with_http()
    work = Path(tempfile.mkdtemp(prefix="gym-serve-soak-"))
    report = asyncio.run(run_soak(config, work, address=ray.get_runtime_context().gcs_address, http_port=port))
    serve.shutdown()
    ray.shutdown()

    base = harness.write_result("soak", {"workdir": str(work), **report.model_dump()})
    plot(report, base.with_suffix(".png"))
    print("\n" + summary(report))
    print(f"-> {base}.json, .png")
    sys.exit(1 if report.problems else 0)


def summary(report: SoakReport) -> str:
    retryable = sum(report.faults.get(kind, 0) for kind in ("http_5xx", "http_429", "timeout", "drop"))
    faults = ", ".join(f"{kind} {report.faults.get(kind, 0)}" for kind in KINDS)
    rows = [
        (
            "rollouts, collector",
            f"{report.config.rollouts} expected: {report.chaos.rollouts} written, "
            f"{report.chaos.failures} failure rows",
        ),
        (
            "rollouts, ingress",
            f"{report.config.ingress_rollouts} expected: {report.ingress.rollouts} rollouts, "
            f"{report.ingress.failures} failure rows ({report.ingress.rollouts_per_s:.1f}/s)",
        ),
        ("lost / duplicated", f"{report.lost} / {report.duplicated}"),
        ("untyped failure rows", report.untyped_failures),
        ("rewards unlike undisturbed", report.reward_mismatches),
        ("failure rows by kind", ", ".join(f"{k} {v}" for k, v in sorted(report.failures_by_kind.items())) or "none"),
        ("faults injected", f"{faults} (of {report.model_calls} model calls)"),
        ("model calls retried", f"{retryable} (by the Model tier's client: the 5xx, 429, timeouts, drops)"),
        (
            "rollout retries",
            f"{report.retries_last_run} in the collector's last run (a killed run's count dies with it)",
        ),
        ("replicas killed", ", ".join(f"{k} {v}" for k, v in sorted(report.kills.items()))),
        ("collector SIGKILLs", f"{report.collector_kills}, each resumed"),
        *(("JSONL at a kill", check) for check in report.jsonl_checks),
        ("rollouts/s undisturbed", f"{report.quiet.rollouts_per_s:.1f} ({report.quiet.seconds:.0f} s)"),
        (
            "rollouts/s under chaos",
            f"{report.chaos.rollouts_per_s:.1f} ({report.chaos.seconds:.0f} s, resumes included)",
        ),
    ]
    return harness.checklist(rows, report.problems, ok="all invariants held")


def plot(report: SoakReport, path: Path) -> None:
    plt = harness.pyplot()
    fig, (faults, kills, rates) = plt.subplots(1, 3, figsize=(14, 4))
    faults.bar(list(KINDS), [report.faults.get(k, 0) for k in KINDS])
    faults.set_title(f"faults injected ({report.model_calls} model calls)")
    faults.tick_params(axis="x", rotation=30)
    tiers = sorted(report.kills)
    kills.bar([*tiers, "collector"], [*(report.kills[t] for t in tiers), report.collector_kills])
    kills.set_title("kills")
    rates.bar(["quiet", "chaos"], [report.quiet.rollouts_per_s, report.chaos.rollouts_per_s])
    rates.set_title(f"rollouts/s ({report.lost} lost, {report.duplicated} duplicated)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
