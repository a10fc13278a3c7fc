"""The replay Model tier: recorded outputs played back; the embedded default.

With `kind: synthetic` the same recordings are played back at a cost you set
(latency, per-replica capacity, payload size, response lengths decoded at a
time per token): a stand-in model for benchmarks. `stats()` says how many
tokens a replica generated.
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
from gym_serve.models.synthetic import Capacity, Decoder, token_bundle
from gym_serve.rollout.replay import ReplayModel
from gym_serve.serving.config import ReplayModelArgs, SyntheticModelArgs

DEFAULTS: dict[str, Any] = {"max_ongoing_requests": 4096, "ray_actor_options": {"num_cpus": 0}}


@serve.deployment(name="Model")
class ReplayModelDeployment(BatchedResponses):
    def __init__(self, args: ReplayModelArgs, default_env: str | None = None) -> None:
        sources = args.recordings or ([default_env] if default_env else [])
        self.model = ReplayModel([recording_path(s) for s in sources], error_rate=args.error_rate, name=args.kind)
        self.synthetic = args if isinstance(args, SyntheticModelArgs) else None
        self._decoder = Decoder(args.seconds_per_token if isinstance(args, SyntheticModelArgs) else 0.0)
        if self.synthetic is not None:
            self._rng = random.Random(self.synthetic.seed)
            self._capacity = Capacity(self.synthetic.max_concurrency)
        self.load = Load()

    @counted
    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        synthetic = self.synthetic
        if synthetic is None:
            return self.model.respond(request, session)
        tokens = synthetic.lengths.sample(self._rng) if synthetic.lengths is not None else synthetic.output_tokens
        async with self._capacity:
            await synthetic.latency.wait(self._rng)
            if synthetic.lengths is not None:
                await self._decoder.decode(tokens)
        response = self.model.respond(request, session)
        last = response["output"][-1]
        if synthetic.lengths is not None:
            items = request["input"] if isinstance(request["input"], list) else [request["input"]]
            last.update(token_bundle(items, tokens))
        elif synthetic.output_tokens or synthetic.prompt_tokens:
            self._decoder.generated += synthetic.output_tokens
            last["prompt_token_ids"] = list(range(synthetic.prompt_tokens))
            last["generation_token_ids"] = list(range(synthetic.output_tokens))
            last["generation_log_probs"] = [-1.0] * synthetic.output_tokens
        return response

    def stats(self) -> dict[str, Any]:
        """The tokens this replica generated (a synthetic model's; 0 for replay), as the vLLM tier's `stats` says."""
        return {"generation_tokens": self._decoder.generated}

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
