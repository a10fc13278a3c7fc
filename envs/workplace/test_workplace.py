"""Workplace: several tools change a per-rollout database; the final state decides the reward."""

from __future__ import annotations

import asyncio

from gym_serve import EnvRunner

from . import Workplace

ENV, CONFIG = Workplace, None
ROW = {"responses_create_params": {"input": "close T-2"}, "goal": {"tickets": {"T-2": {"status": "closed"}}}}


def call(name: str, arguments: str) -> list[dict]:
    return [{"type": "function_call", "name": name, "arguments": arguments, "call_id": "c"}]


async def test_each_rollout_has_its_own_database() -> None:
    runner = EnvRunner(Workplace())
    first, second = await asyncio.gather(runner.seed(ROW), runner.seed(ROW))
    _, first = await runner.call_tools(call("set_ticket_status", '{"ticket_id": "T-2", "status": "closed"}'), first)
    assert first["tickets"]["T-2"]["status"] == "closed" and second["tickets"]["T-2"]["status"] == "open"
    assert (await runner.verify(ROW, {"output": []}, first))["reward"] == 1.0
    assert (await runner.verify(ROW, {"output": []}, second))["reward"] == 0.0


async def test_collateral_changes_and_bad_calls() -> None:
    runner = EnvRunner(Workplace())
    state = await runner.seed(ROW)
    outputs, state = await runner.call_tools(
        call("set_ticket_status", '{"ticket_id": "T-9", "status": "closed"}'), state
    )
    assert "no ticket 'T-9'" in outputs[0]["output"]
    for ticket in ("T-2", "T-4"):  # closing everything is not a strategy
        _, state = await runner.call_tools(
            call("set_ticket_status", f'{{"ticket_id": "{ticket}", "status": "closed"}}'), state
        )
    verdict = await runner.verify(ROW, {"output": []}, state)
    assert verdict["reward"] == 0.0 and verdict["reward_components"]["untouched"] == 0.0
