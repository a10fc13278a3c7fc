"""pytest fixtures for environment authors and gym-serve's own tests: one Ray + Serve instance per module.

Load them with `pytest_plugins = ["gym_serve.testing.fixtures"]` in a `conftest.py`
(the repository's root conftest does), then ask for `serve_instance` in a test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_serve.environment.core import Environment
from gym_serve.environment.registry import load_environment_class
from gym_serve.rollout.local import run_local
from gym_serve.rollout.replay import ReplayModel
from gym_serve.wire.jsonl import read_jsonl

__all__ = ["example_rows", "replay_examples", "serve_instance", "tiny_model", "unique"]


@pytest.fixture(scope="module")
def serve_instance() -> Iterator[None]:
    """A local Ray instance with Serve (no HTTP proxy), shut down when the module's tests end."""
    import ray
    from ray import serve

    from gym_serve.serving.cluster import start_local

    start_local(num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    yield
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny local chat model (`gym_serve.models.tiny_model`), made once per test run for every module that
    loads it (making it takes seconds: a tokenizer is trained). Read-only: write beside it, never into it."""
    from gym_serve.models.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def unique(prefix: str) -> str:
    """An application name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def example_rows(env_name: str) -> list[dict[str, Any]]:
    """The rows of an environment's `data/example.jsonl`."""
    path = load_environment_class(env_name).data_dir() / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def replay_examples(
    cls: type[Environment], config: Any = None
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(row, right rollout, wrong rollout) for every example row, in-process: the replay model at error_rate 0, then 1.

    The in-process twin of `gym-serve env test`'s run through Serve, for an environment's own tests (no Ray):
    they assert what each rollout must hold (`reward` 1.0 / 0.0, and their own fields).
    """
    right = ReplayModel.for_environment(cls)
    wrong = ReplayModel.for_environment(cls, error_rate=1.0)
    results = []
    for i, (_, row) in enumerate(read_jsonl(cls.data_dir() / "example.jsonl")):
        row = {**row, "_ng_task_index": i, "_ng_rollout_index": 0}
        results.append((row, await run_local(row, cls(config), right), await run_local(row, cls(config), wrong)))
    return results
