"""The dispatcher's side of pausing a batch and continuing partials, with the episode loop in this process (a
unit test of the logic; tests/test_rollouts_survive.py runs the same through Serve): what never started comes
back as a partial of turn 0, what runs stops at its next turn boundary, and a partial goes on to the end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gym_serve.collect.dispatch import Dispatcher, Rollout
from gym_serve.environment.runner import EnvRunner
from gym_serve.rollout.checkpoint import PAUSED, RUN, Checkpoint, Paused
from gym_serve.rollout.loop import AgentConfig, run_episode
from gym_serve.wire.tokens import check_contiguity
from tests.fault_parts import SlowCounter
from tests.test_turn_checkpoints import TokenModel, counter_row


class Agents:
    """The Agent deployment's side in-process: `_gs_run` read, stop keys honoured (the `AgentControl` too)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.stops: set[str] = set()
        self.started = asyncio.Event()

    async def __call__(self, agent: str, row: dict[str, Any], on_turn: Any = None) -> dict[str, Any]:
        control = row[RUN]
        row = {k: v for k, v in row.items() if k != RUN}
        env = EnvRunner(SlowCounter({"delay_s": 0.0}))
        self.started.set()
        try:
            return await run_episode(
                row,
                model=self.model,
                env=env,
                env_info=env.describe(),
                config=AgentConfig(),
                resume=Checkpoint.from_wire(control["resume"]) if control["resume"] else None,
                on_turn=on_turn,
                stop=lambda: any(key in self.stops for key in control["stop"]),
            )
        except Paused as paused:
            return {PAUSED: paused.turn}

    async def stop(self, agent: str, keys: list[str], abort: bool) -> None:
        self.stops.update(keys)

    async def policy(self, agent: str) -> str:
        return "counter-model"

    async def current_version(self, agent: str) -> int:
        return 0


class HeldModel(TokenModel):
    """Its second call of every rollout waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        if sum(1 for item in request["input"] if item.get("type") == "function_call_output") == 1:
            self.waiting.set()
            await self.release.wait()
        return await super().responses(request, session)


async def test_a_paused_batch_returns_what_runs_at_its_next_boundary_and_what_waits_untouched() -> None:
    model = HeldModel()
    agents = Agents(model)
    dispatcher = Dispatcher(["counter"], max_in_flight=1, send=agents, control=agents)
    rollouts = [Rollout("counter", counter_row(3, task=t), t + 1) for t in range(3)]
    stream = dispatcher.stream(rollouts)
    results: list[tuple[Rollout, Any]] = []

    async def drain() -> None:
        async for item in stream:
            results.append(item)

    draining = asyncio.ensure_future(drain())
    await model.waiting.wait()  # task 0 is in its second model call; tasks 1 and 2 wait for the one slot
    assert await stream.pause() == 1
    model.release.set()
    await asyncio.wait_for(draining, 10)
    partials = {r.task: o.row for r, o in results}
    assert all(o.partial and o.row["partial"] for _, o in results)
    assert {t: p["turns"] for t, p in partials.items()} == {0: 2, 1: 0, 2: 0}
    assert [turn for session, turn in model.calls if session == "1:0"] == [], "a rollout not started never runs"

    continued = await dispatcher.continued(enumerate(json.loads(json.dumps(list(partials.values()))), 1))
    assert all(isinstance(c, Rollout) for c in continued)
    agents.stops.clear()
    done = {r.task: o.row async for r, o in dispatcher.stream([c for c in continued if isinstance(c, Rollout)])}
    assert all(row["reward"] == 1.0 and check_contiguity(row).ok for row in done.values())
    assert done[0]["resumed_at_turn"] == 2 and "resumed_at_turn" not in done[1]
    assert [turn for session, turn in model.calls if session == "0:0"] == [1, 2, 3, 4], "no turn ran twice"
    assert [s["turns"] for s in done[0]["segments"]] == [[0, 2], [2, 4]] and "segments" not in done[1]
