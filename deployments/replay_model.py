"""The replay Model tier: recorded outputs played back; the embedded default.

With `kind: synthetic` the same recordings are played back at a cost you set
(latency, per-replica capacity, payload size): a stand-in model for benchmarks.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ray import serve

from gym_serve.calls.autoscaling import Load, counted
from gym_serve.calls.batching import BatchedResponses
from gym_serve.environment import nemo_gym
from gym_serve.environment.registry import load_environment_class
from gym_serve.models.synthetic import Capacity
from gym_serve.rollout.replay import ReplayModel
from gym_serve.serving.config import ReplayModelArgs, SyntheticModelArgs

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Model")
class ReplayModelDeployment(BatchedResponses):
    def __init__(self, args: ReplayModelArgs, default_env: str | None = None) -> None:
        sources = args.recordings or ([default_env] if default_env else [])
        self.model = ReplayModel([recording_path(s) for s in sources], error_rate=args.error_rate, name=args.kind)
        self.synthetic = args if isinstance(args, SyntheticModelArgs) else None
        if self.synthetic is not None:
            self._rng = random.Random(self.synthetic.seed)
            self._capacity = Capacity(self.synthetic.max_concurrency)
        self.load = Load()

    @counted
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        if self.synthetic is None:
            return self.model.respond(request, session)
        async with self._capacity:
            await self.synthetic.latency.wait(self._rng)
        response = self.model.respond(request, session)
        if self.synthetic.output_tokens or self.synthetic.prompt_tokens:
            last = response["output"][-1]
            last["prompt_token_ids"] = list(range(self.synthetic.prompt_tokens))
            last["generation_token_ids"] = list(range(self.synthetic.output_tokens))
            last["generation_log_probs"] = [-1.0] * self.synthetic.output_tokens
        return response

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.load.stats()


def recording_path(source: str) -> Path:
    """A recordings file path, or an environment name meaning its `data/example_rollouts.jsonl`.

    A hosted NeMo Gym server's (`nemo_gym:<server>`) are NeMo Gym's own recordings.
    """
    if source.endswith(".jsonl") or "/" in source:
        return Path(source)
    server = nemo_gym.server_name(source)
    if server is not None:
        return nemo_gym.data_dir(server) / "example_rollouts.jsonl"
    return load_environment_class(source).data_dir() / "example_rollouts.jsonl"
