"""What the vLLM-tier harness tests share: one tiny engine per module, the harnesses' own environments, the
four token checks of a harness rollout (`tests/test_harness_agents.py`, `tests/test_cli_harnesses.py`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
from ray import serve

from gym_serve.deployments.app import build_app
from gym_serve.rollout.capture import calls_of
from gym_serve.serving.cluster import start_local
from gym_serve.serving.config import AppArgs
from gym_serve.wire.tokens import check_contiguity
from tests.conftest import REPO
from tests.logprobs import Recompute

MODEL_APP = "harness_model"
LIGHT = {"ray_actor_options": {"num_cpus": 0}}


@contextmanager
def tiny_engine_app(tiny_model: Path, apps: dict[str, AppArgs], *, max_model_len: int = 4096) -> Iterator[str]:
    """Ray, Serve (HTTP on a free port) and the tiny model on the vLLM tier as the application `MODEL_APP`,
    then `apps`, each naming it as their Model tier (`model: {kind: app, app: MODEL_APP}`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    engine = {
        "model": str(tiny_model),
        "dtype": "float32",
        "max_model_len": max_model_len,
        "max_num_seqs": 8,
        "gpu_memory_utilization": 0.3,
        "enforce_eager": True,
        "extra": {
            "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}
        },  # else a JSON answer never ends
    }
    model = {"kind": "vllm", "engine": engine, "default_max_output_tokens": 24, "deployment": LIGHT}
    try:
        serve.run(build_app(AppArgs.model_validate({"model": model})), name=MODEL_APP, route_prefix=None)
        for name, args in apps.items():
            serve.run(build_app(args), name=name, route_prefix=None)
        yield MODEL_APP
    finally:
        serve.shutdown()
        ray.shutdown()


def harness_env(name: str) -> str:
    """The folder `scripts/harness_envs.py` built for `name` (built now if it is not cached yet)."""
    script = [sys.executable, str(REPO / "scripts" / "harness_envs.py")]
    built = subprocess.run([*script, "build", name], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"cannot build the {name} harness: {built.stdout[-2000:]}{built.stderr[-2000:]}"
    found = subprocess.run([*script, "path", name], check=True, capture_output=True, text=True, timeout=60)
    return found.stdout.strip()


def token_checks(rollout: dict[str, Any], recompute: Recompute) -> dict[str, Any]:
    """The four checks of one harness rollout; returns the numbers the report quotes."""
    assert "_ng_failure_class" not in rollout, rollout.get("error")
    assert isinstance(rollout["reward"], float), "the rollout is scored"
    calls = calls_of(rollout)
    assert calls and all(bundle is not None for _, bundle in calls), "every call the gateway saw has its tokens"
    report = check_contiguity(rollout)
    assert report.ok and report.calls == len(calls), report.problems
    compared, delta = recompute.max_delta(calls)
    assert compared > 0 and delta <= 1e-4, delta
    numbers = {"calls": report.calls, "segments": report.segments, "max_abs_dlogp": delta, "tokens": compared}
    print(json.dumps(numbers))
    return numbers
