"""Synthetic load: the weather task with tool and verify costs you dial in. For benchmarks and tests only.

Same rows, tool, recordings and reward as `example_single_tool_call` (NeMo
Gym's quick-start shape: 2 model turns, 1 tool call, verify), so the replay
and synthetic models answer it from the weather recordings. Its config adds:

- `tool_latency` / `verify_latency`: I/O wait per call (fixed or long-tailed);
- `tool_cpu_ms` / `verify_cpu_ms`: CPU time per call, one core per replica at most;
- `max_concurrent_verifications`: a per-replica capacity (a pool of N sandboxes
  or judge connections), so one replica's throughput is bounded and more
  replicas help: what the autoscaling and scale-out benchmarks need.
"""

from __future__ import annotations

import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gym_serve import Response, Task, tool
from gym_serve.envs.example_single_tool_call import Weather
from gym_serve.models.synthetic import Capacity, Latency, burn_cpu


class SyntheticLoadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_latency: Latency = Field(default_factory=Latency)
    verify_latency: Latency = Field(default_factory=Latency)
    tool_cpu_ms: float = Field(default=0.0, ge=0.0)
    verify_cpu_ms: float = Field(default=0.0, ge=0.0)
    max_concurrent_verifications: int | None = Field(default=None, ge=1)
    seed: int = 0


class SyntheticLoad(Weather):
    Config = SyntheticLoadConfig

    def __init__(
        self, config: SyntheticLoadConfig | dict | None = None, *, verify_timeout_s: float | None = None
    ) -> None:
        super().__init__(config, verify_timeout_s=verify_timeout_s)
        self._rng = random.Random(self.config.seed)
        self._verifiers = Capacity(self.config.max_concurrent_verifications)

    @classmethod
    def data_dir(cls) -> Path:
        """The weather task's rows and recordings."""
        return Weather.data_dir()

    @tool
    async def get_weather(self, city: str) -> dict:
        """Get the current weather in a city.

        Args:
            city: The city's name, e.g. "San Francisco".
        """
        await self.config.tool_latency.wait(self._rng)
        await burn_cpu(self.config.tool_cpu_ms)
        return await super().get_weather(city)

    async def verify(self, task: Task, response: Response) -> float:
        async with self._verifiers:
            await self.config.verify_latency.wait(self._rng)
            await burn_cpu(self.config.verify_cpu_ms)
            return await super().verify(task, response)
