"""Long-tail control for GRPO groups: step time and tokens, with and without group policies, in one run.

    python benchmarks/long_tail.py [--steps 6] [--groups 8] [--group-size 8] [--finish-at 6] [--over-provision 2]
                                   [--min-tokens 16] [--alpha 1.2] [--max-tokens 2048] [--seconds-per-token 0.001]

The model is the synthetic one (`kind: synthetic`) with heavy-tailed response lengths: each call's length is
drawn from a Pareto of shape `--alpha` above `--min-tokens` (capped at `--max-tokens`) and decoded at
`--seconds-per-token`, so a few calls take far longer than the rest, as a reasoning model's do. The
environment is `example_multi_step` (3 to 5 model turns per rollout, replayed; `error_rate` 0.5 makes the
rewards within a group differ). A trainer step asks the in-cluster stream (`ServeRollouts`) for `--groups`
new tasks × `--group-size` rollouts and waits until every new task's group is out. Each policy runs
`--steps` steps in turn on the same deployment:

* `all n`: every rollout of a group (no policy);
* `k of n, masked`: a group finishes once `--finish-at` have, the rest cut at once as masked rows;
* `k of n, partial`: the same, the rest stopped at their next turn boundary and continued at the next step;
* `n of n+m, masked`: `--over-provision` more rollouts started, the first `--group-size` kept;
* `differ, partial`: a group finishes once its finished rewards differ, the rest continued next step.

Step time: from a step's start until its last new group is out (p50, p99 over steps); in the partial modes the
stragglers then stop at their next boundary (the *drain*, reported apart: an asynchronous trainer trains
meanwhile). Tokens generated: the Model replicas' own count. Tokens wasted: generated minus those in the rows a
trainer receives finished (partials are continued to the end after the last step, so their tokens are not
wasted). Prints a table, writes `results/long_tail-<date>.json` and a PNG of the step times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from harness import REPO, deploy, heavy_tailed_app, pyplot, start, table, write_result

ROWS = REPO / "envs" / "example_multi_step" / "data" / "example.jsonl"
APP = "long_tail"


def policies(args: argparse.Namespace) -> dict[str, dict[str, Any] | None]:
    k, m = args.finish_at, args.over_provision
    return {
        "all n": None,
        f"{k} of n, masked": {"finish_at": k, "stragglers": "masked"},
        f"{k} of n, partial": {"finish_at": k, "stragglers": "partial"},
        f"n of n+{m}, masked": {"over_provision": m, "stragglers": "masked"},
        "differ, partial": {"until_rewards_differ": True, "stragglers": "partial"},
    }


def app(args: argparse.Namespace) -> dict[str, Any]:
    return heavy_tailed_app(
        APP,
        min_tokens=args.min_tokens,
        alpha=args.alpha,
        max_tokens=args.max_tokens,
        seconds_per_token=args.seconds_per_token,
        error_rate=0.5,
    )


async def generated_tokens() -> int:
    from ray import serve

    stats = await serve.get_deployment_handle("Model", app_name=APP).broadcast("stats").results_async()
    return sum(int(s["generation_tokens"]) for s in stats)


def tokens(row: dict[str, Any]) -> int:
    from gym_serve.wire.tokens import token_calls

    return sum(len(c["generation_token_ids"]) for c in token_calls((row.get("response") or {}).get("output") or []))


async def run_policy(
    name: str, policy: dict[str, Any] | None, rows: list[dict[str, Any]], args: argparse.Namespace, first_task: int
) -> dict[str, Any]:
    from gym_serve.collect.stream import ServeRollouts

    source = ServeRollouts(agents=[APP], default_agent=APP, max_in_flight=4096)
    before = await generated_tokens()
    partials: list[dict[str, Any]] = []
    steps, drains, delivered, cut = [], [], 0, 0
    for step in range(args.steps):
        tasks = range(first_task + step * args.groups, first_task + (step + 1) * args.groups)
        batch_rows = [{**rows[t % len(rows)], "_ng_task_index": t} for t in tasks]
        batch = source.rollouts(
            batch_rows, partials=partials, num_repeats=args.group_size, group_size=args.group_size, group_policy=policy
        )
        partials, waiting, started = [], set(tasks), time.perf_counter()
        step_s = None
        async for group in batch.groups():
            for row in group:
                if row.get("partial"):
                    partials.append(row)
                elif "_ng_failure_class" in row:
                    cut += 1
                else:
                    delivered += tokens(row)
            if len(group) and not group[0].get("partial") and not group[0].get("straggler"):
                waiting.discard(group[0]["_ng_task_index"])
            if not waiting and step_s is None:
                step_s = time.perf_counter() - started
        assert step_s is not None, f"{name}: step {step} ended before all its groups"
        steps.append(step_s)
        drains.append(time.perf_counter() - started - step_s)
    left = [r async for r in source.rollouts(partials=partials)]  # the last stragglers, to their end (untimed)
    delivered += sum(tokens(r) for r in left if "_ng_failure_class" not in r)
    generated = await generated_tokens() - before
    ordered = sorted(steps)
    return {
        "policy": policy,
        "step_s": steps,
        "drain_s": drains,
        "step_p50_s": statistics.median(steps),
        "step_p99_s": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "tokens_generated": generated,
        "tokens_delivered": delivered,
        "tokens_wasted": generated - delivered,
        "rollouts_cut": cut,
    }


async def measure(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    runs = {}
    for i, (name, policy) in enumerate(policies(args).items()):
        runs[name] = await run_policy(name, policy, rows, args, first_task=i * args.steps * args.groups)
        print(f"{name}: step p50 {runs[name]['step_p50_s']:.2f} s, wasted {runs[name]['tokens_wasted']} tokens")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=8, help="new tasks per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--finish-at", type=int, default=6, help="k of the k-of-n policies")
    parser.add_argument("--over-provision", type=int, default=2, help="m of the n-of-n+m policy")
    parser.add_argument("--min-tokens", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=1.2, help="Pareto shape of the response lengths")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--seconds-per-token", type=float, default=0.001)
    args = parser.parse_args()
    from ray import serve

    start()
    deploy(app(args))
    runs = asyncio.run(measure(args))
    serve.shutdown()
    base = write_result("long_tail", {"options": vars(args), "runs": runs})
    plot(runs, base.with_suffix(".png"))
    print(
        table(
            ["policy", "step p50 s", "step p99 s", "drain p50 s", "tokens generated", "wasted", "wasted %", "cut"],
            [
                [
                    name,
                    run["step_p50_s"],
                    run["step_p99_s"],
                    statistics.median(run["drain_s"]),
                    run["tokens_generated"],
                    run["tokens_wasted"],
                    100 * run["tokens_wasted"] / max(run["tokens_generated"], 1),
                    run["rollouts_cut"],
                ]
                for name, run in runs.items()
            ],
        )
    )
    print(f"-> {base}.json")


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, (steps, waste) = plt.subplots(1, 2, figsize=(12, 4))
    names = list(runs)
    steps.boxplot([runs[n]["step_s"] for n in names], tick_labels=names, orientation="horizontal")
    steps.set_xlabel("step time (s): until every group of the step is out")
    waste.barh(names, [runs[n]["tokens_wasted"] for n in names], color="tab:red", label="wasted")
    waste.barh(names, [runs[n]["tokens_delivered"] for n in names], left=[runs[n]["tokens_wasted"] for n in names])
    waste.set_xlabel("tokens: wasted (red) and delivered")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
