"""Session counter: tools change per-rollout state; the reward checks the final count."""

from __future__ import annotations

import asyncio

from gym_serve import EnvRunner

from . import Counter, CounterTask, SessionCounter

ROW = {"responses_create_params": {"input": "add 2"}, "initial_count": 3, "expected_count": 5}


async def test_verify_checks_the_final_state() -> None:
    env, task = SessionCounter(), CounterTask(initial_count=3, expected_count=5)
    assert await env.verify(task, None, Counter(count=5)) == 1.0
    assert await env.verify(task, None, Counter(count=4)) == 0.0


async def test_state_travels_with_the_rollout_not_the_runner() -> None:
    runner = EnvRunner(SessionCounter())
    add = [{"type": "function_call", "name": "increment_counter", "arguments": '{"count": 2}', "call_id": "a"}]
    states = await asyncio.gather(*(runner.seed({**ROW, "initial_count": i}) for i in range(5)))
    results = await asyncio.gather(*(runner.call_tools(add, state) for state in states))
    assert [state["count"] for _, state in results] == [2, 3, 4, 5, 6]
    assert (await runner.verify(ROW, {"output": []}, results[3][1]))["reward"] == 1.0
