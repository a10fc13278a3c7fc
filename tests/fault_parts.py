"""Environments and model deployments that misbehave on purpose, for the fault-tolerance tests.

They live in an importable module (`tests.fault_parts:...`) so Serve replicas in
other processes, and Serve configs, can load them by import path.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from ray import serve

from gym_serve import Environment, Task, tool
from gym_serve.calls.batching import BatchedResponses


class SlowConfig(BaseModel):
    delay_s: float = 0.02
    marker_dir: str | None = None
    """Where a hanging seed leaves `started-*` and, once cancelled, `cancelled-*` files (cancellation arrived)."""


class CountTask(Task):
    bumps: int
    hang: bool = False


class Count(BaseModel):
    count: int = 0


class SlowCounter(Environment):
    """Counts `bump` calls in the rollout's state; each call takes `delay_s`; rows with `hang` never return."""

    Task = CountTask
    State = Count
    Config = SlowConfig

    @tool
    async def bump(self, state: Count) -> int:
        """Add one to the counter."""
        await asyncio.sleep(self.config.delay_s * random.uniform(0.5, 1.5))
        state.count += 1
        return state.count

    async def reset(self, task: CountTask) -> Count:
        if task.hang:
            marker = uuid.uuid4().hex
            self._mark("started", marker)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self._mark("cancelled", marker)
                raise
        return Count()

    def _mark(self, what: str, marker: str) -> None:
        if self.config.marker_dir is not None:
            (Path(self.config.marker_dir) / f"{what}-{marker}").touch()

    async def verify(self, task: CountTask, response, state: Count) -> float:
        return 1.0 if state.count == task.bumps else 0.0


class GatedConfig(SlowConfig):
    park_at: int | None = None
    """The bump that waits at the test's gate (`tests.parked_env.gate`) before it counts, naming its replica."""


class GatedCounter(SlowCounter):
    """`SlowCounter` whose `park_at`-th bump of every rollout waits at the gate: a rollout held mid-turn."""

    Config = GatedConfig

    @tool
    async def bump(self, state: Count) -> int:
        """Add one to the counter."""
        if state.count + 1 == self.config.park_at:
            from tests.parked_env import gate

            await gate().wait.remote(serve.get_replica_context().replica_id.unique_id)
        state.count += 1
        return state.count


def bump_turn(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Call `bump` until the count asked for in the first user message is reached, then answer."""
    items = request["input"]
    done = sum(1 for item in items if item.get("type") == "function_call_output")
    wanted = int(items[0]["content"])
    if done < wanted:
        return [{"type": "function_call", "name": "bump", "arguments": "{}", "call_id": f"c{done}", "id": "f"}]
    return [
        {
            "type": "message",
            "role": "assistant",
            "id": "m",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
    ]


def token_bump_turn(request: dict[str, Any]) -> list[dict[str, Any]]:
    """`bump_turn` with a token bundle, as a token-exact tier writes one: the prompt extends the previous call's
    prompt + generation by ids for the items after it (never re-tokenized), three generated ids and log-probs."""
    items = request["input"]
    at = max((i for i, item in enumerate(items) if "generation_token_ids" in item), default=None)
    if at is None:
        prompt = [_token(item) for item in items]
    else:
        last = items[at]
        prompt = [*last["prompt_token_ids"], *last["generation_token_ids"], *(_token(i) for i in items[at + 1 :])]
    output = bump_turn(request)
    generated = [(len(prompt) * 7 + k) % 997 for k in range(3)]
    output[-1].update(
        prompt_token_ids=prompt,
        generation_token_ids=generated,
        generation_log_probs=[-0.25 * (k + 1) for k in range(3)],
    )
    return output


def _token(item: dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(item, sort_keys=True).encode()) % 1000


@serve.deployment(name="Model", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=500)
class BumpModel(BatchedResponses):
    """A scripted policy for `SlowCounter`. With `fail_first`, every session's first call fails (a flaky endpoint);
    with `tokens`, every call carries a contiguous token bundle; with `log`, every call appends
    `<session> <call number>` to that file (the calls survive the process)."""

    def __init__(
        self, delay_s: float = 0.01, fail_first: bool = False, tokens: bool = False, log: str | None = None
    ) -> None:
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.tokens = tokens
        self.log = log
        self.seen: set[str] = set()
        self.calls: dict[str | None, int] = {}

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        await asyncio.sleep(self.delay_s)
        if self.fail_first and session not in self.seen:
            self.seen.add(session)
            raise ConnectionError(f"503 from the model endpoint (session {session})")
        self.calls[session] = self.calls.get(session, 0) + 1
        if self.log is not None:
            turn = 1 + sum(1 for item in request["input"] if item.get("type") == "function_call_output")
            with open(self.log, "a") as log:
                log.write(f"{session} {turn}\n")
        if self.tokens:
            return {"id": "r", "object": "response", "status": "completed", "output": token_bump_turn(request)}
        usage = {"input_tokens": len(request["input"]), "output_tokens": 1, "total_tokens": len(request["input"]) + 1}
        return {"id": "r", "object": "response", "status": "completed", "output": bump_turn(request), "usage": usage}

    def calls_of(self, session: str) -> int:
        return self.calls.get(session, 0)


def counting_rows(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "responses_create_params": {"input": [{"role": "user", "content": str(1 + i % 3)}]},
            "bumps": 1 + i % 3,
            "task_id": i,
            **extra,
        }
        for i in range(n)
    ]


def counter_app_args(
    name: str,
    *,
    env_replicas: int = 1,
    agent_replicas: int = 1,
    delay_s: float = 0.02,
    tier_call_timeout_s: float = 30.0,
) -> dict[str, Any]:
    return {
        "environment": {
            "name": "tests.fault_parts:SlowCounter",
            "config": {"delay_s": delay_s},
            "deployment": {"num_replicas": env_replicas},
        },
        "agent": {"tier_call_timeout_s": tier_call_timeout_s, "deployment": {"num_replicas": agent_replicas}},
        "model": {"kind": "app", "app": name},
    }


def build_bump_model(args: dict[str, Any]) -> Any:
    """A Serve application builder for `BumpModel`, so a config file can deploy it."""
    return BumpModel.bind(**args)
