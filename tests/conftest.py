"""Shared fixtures: one Ray + Serve instance per test module, and the example environments' files."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_ENVS = ("example_single_tool_call", "example_multi_step", "example_session_state")


@pytest.fixture(scope="module")
def serve_instance() -> Iterator[None]:
    """A local Ray instance with Serve (no HTTP proxy), shut down when the module's tests end."""
    import ray
    from ray import serve

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    yield
    serve.shutdown()
    ray.shutdown()


def unique(prefix: str) -> str:
    """An application name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def example_rows(env_name: str) -> list[dict[str, Any]]:
    path = REPO / "envs" / env_name / "data" / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
