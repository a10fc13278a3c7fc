"""The replay Model tier: recorded outputs played back; the embedded default."""

from __future__ import annotations

from pathlib import Path
from collections.abc import AsyncIterator
from typing import Any

from ray import serve

from gym_serve.batching import stream_batch
from gym_serve.config import ReplayModelArgs
from gym_serve.registry import load_environment_class
from gym_serve.replay import ReplayModel

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Model")
class ReplayModelDeployment:
    def __init__(self, args: ReplayModelArgs, default_env: str | None = None) -> None:
        sources = args.recordings or ([default_env] if default_env else [])
        self.model = ReplayModel([recording_path(s) for s in sources], error_rate=args.error_rate)

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        return self.model.respond(request, session)

    async def responses_batch(self, calls: list[tuple[dict[str, Any], str | None]]) -> AsyncIterator[list[tuple[int, Any]]]:
        """Many `responses` calls in one streaming request (see `gym_serve.batching`)."""
        async for item in stream_batch(self.responses, calls):
            yield item


def recording_path(source: str) -> Path:
    """A recordings file path, or an environment name meaning its `data/example_rollouts.jsonl`."""
    if source.endswith(".jsonl") or "/" in source:
        return Path(source)
    return load_environment_class(source).data_dir() / "example_rollouts.jsonl"
