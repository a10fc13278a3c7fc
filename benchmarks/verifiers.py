"""Verifiers: verifications/s per verifier, and for the math and code verifiers 1 vs 2 Environment replicas.

Each verifier is measured through the environment that uses it, on that
environment's own recorded answers (right and wrong, `data/example_rollouts.jsonl`),
called `verify` after `verify` with 16 in flight (64 through Serve) for `--seconds`.
Answers that take longer than `--slow-cutoff` to verify once (the hostile
programs among code_generation's recordings, which run to the sandbox's limits)
are left out and counted: they measure containment (tests/verifiers), not speed.

| environment | verifier |
|---|---|
| math | `gym_serve.verifiers.math` (math-verify in a worker process, with a deadline) |
| multiple_choice | `gym_serve.verifiers.multiple_choice` |
| code_generation | `gym_serve.verifiers.code` (each verification a sandboxed Python process) |
| structured_outputs | `gym_serve.verifiers.json_schema` |
| text_to_sql | `gym_serve.verifiers.sql` (read-only SQLite, with a timeout) |
| instruction_following | `gym_serve.verifiers.instruction_following` |
| function_calling | `gym_serve.verifiers.tool_calls` |
| reasoning_gym | reasoning-gym's own scorers |
| llm_judge_qa | `gym_serve.verifiers.llm_judge` (shipped judge recordings: the round trip's cost, not a model's) |

In-process first (one process, the cost of the verifier itself), then through
Serve for math and code_generation: the Environment deployment at 1 and 2
replicas, called as the Agent calls it (micro-batched `batch("verify", ...)`
requests, one part per replica), to see what a second replica (a second core
here) buys.

    python benchmarks/verifiers.py [--seconds 5] [--envs math code_generation]

Prints a table last; writes benchmarks/results/verifiers-<date>.json.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # as a script (not re-imported by a worker process, see multiprocessing's spawn):
    import harness  # from this script's folder, which then leaves the path,

    sys.path.remove(harness.__file__.rsplit("/", 1)[0])  # or `import verifiers` would find this file

import argparse  # noqa: E402
import asyncio  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import ray
from ray import serve

from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvRunner
from gym_serve.wire.jsonl import read_jsonl

VERIFIERS = {
    "math": "math",
    "multiple_choice": "multiple_choice",
    "code_generation": "code",
    "structured_outputs": "json_schema",
    "text_to_sql": "sql",
    "instruction_following": "instruction_following",
    "function_calling": "tool_calls",
    "reasoning_gym": "reasoning-gym scorers",
    "llm_judge_qa": "llm_judge",
}
SCALED = ("math", "code_generation")
IN_FLIGHT = 16


def recordings(env: str, slow_cutoff_s: float) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], int]:
    """(row, response) of every recorded answer, right and wrong, that verifies within the cutoff; and how many did
    not."""
    path = load_environment_class(env).data_dir() / "example_rollouts.jsonl"
    cases = [
        ({k: v for k, v in row.items() if k not in ("response", "reward")}, row["response"])
        for _, row in read_jsonl(path)
    ]
    runner = EnvRunner(load_environment_class(env)())

    async def quick(case: tuple[dict[str, Any], dict[str, Any]]) -> bool:
        started = time.perf_counter()
        await runner.verify(*case, None)
        return time.perf_counter() - started <= slow_cutoff_s

    keep = asyncio.run(_all(quick(case) for case in cases))
    return [case for case, ok in zip(cases, keep, strict=True) if ok], keep.count(False)


async def _all(calls: Any) -> list[Any]:
    return [await call for call in calls]  # one at a time: a verification's own time


async def rate(
    verify: Any, cases: list[tuple[dict[str, Any], dict[str, Any]]], seconds: float, in_flight: int = IN_FLIGHT
) -> tuple[float, int]:
    """Verifications/s with `in_flight` calls kept in flight for `seconds`."""
    done, stop = 0, time.perf_counter() + seconds

    async def worker(i: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            row, response = cases[(i + done) % len(cases)]
            await verify(row, response, None)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    return done / (time.perf_counter() - started), done


def in_process(envs: list[str], seconds: float, slow_cutoff_s: float) -> list[dict[str, Any]]:
    results = []
    for env in envs:
        runner = EnvRunner(load_environment_class(env)())
        cases, left_out = recordings(env, slow_cutoff_s)
        asyncio.run(rate(runner.verify, cases, 0.5))  # warm up (worker processes, imports)
        per_s, n = asyncio.run(rate(runner.verify, cases, seconds))
        results.append(
            {
                "env": env,
                "verifier": VERIFIERS[env],
                "where": "in-process",
                "replicas": None,
                "verifications_per_s": per_s,
                "verifications": n,
                "answers": len(cases),
                "left_out_slow": left_out,
            }
        )
        print(f"{env:<22} in-process: {per_s:9.1f} verifications/s", flush=True)
    return results


def through_serve(envs: list[str], seconds: float, slow_cutoff_s: float) -> list[dict[str, Any]]:
    from gym_serve.calls.batching import MicroBatcher
    from gym_serve.deployments.environment import EnvironmentDeployment
    from gym_serve.serving.config import EnvironmentArgs

    harness.start()
    results = []
    for env in envs:
        cases, _ = recordings(env, slow_cutoff_s)
        for replicas in (1, 2):
            name = f"verify-{env}-{replicas}"
            handle = serve.run(
                EnvironmentDeployment.options(num_replicas=replicas, ray_actor_options={"num_cpus": 0}).bind(
                    EnvironmentArgs(name=env)
                ),
                name=name,
                route_prefix=None,
            )
            send = handle.options(stream=True).batch.remote
            batcher = MicroBatcher(lambda calls, send=send: send("verify", calls), parts=lambda n=replicas: n)

            async def verify(
                row: dict[str, Any], response: dict[str, Any], state: None, batcher: MicroBatcher = batcher
            ) -> Any:
                return await batcher((row, response, state))

            asyncio.run(rate(verify, cases, 1.0, in_flight=4 * IN_FLIGHT))  # warm up every replica
            per_s, n = asyncio.run(rate(verify, cases, seconds, in_flight=4 * IN_FLIGHT))
            results.append(
                {
                    "env": env,
                    "verifier": VERIFIERS[env],
                    "where": "serve",
                    "replicas": replicas,
                    "verifications_per_s": per_s,
                    "verifications": n,
                }
            )
            print(f"{env:<22} {replicas} replica(s): {per_s:9.1f} verifications/s", flush=True)
            serve.delete(name)
    ray.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", choices=list(VERIFIERS), default=list(VERIFIERS))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--slow-cutoff", type=float, default=2.0, help="leave out answers slower than this (s)")
    args = parser.parse_args()

    results = in_process(args.envs, args.seconds, args.slow_cutoff)
    results += through_serve([e for e in args.envs if e in SCALED], args.seconds, args.slow_cutoff)
    base = harness.write_result("verifiers", {"in_flight": IN_FLIGHT, "seconds": args.seconds, "results": results})
    rows = [
        [
            r["verifier"],
            r["env"],
            r["where"] if r["replicas"] is None else f"serve, {r['replicas']} replica(s)",
            r["verifications_per_s"],
            r["verifications"],
            r.get("left_out_slow"),
        ]
        for r in results
    ]
    print("\n" + harness.table(["verifier", "environment", "where", "verifications/s", "n", "left out (slow)"], rows))
    print(f"-> {base}.json")


if __name__ == "__main__":
    main()
