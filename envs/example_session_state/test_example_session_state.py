"""Session counter: tools change per-rollout state; the reward checks the final count."""

from __future__ import annotations

import asyncio

from gym_serve import EnvRunner
from gym_serve.wire.jsonl import dumps

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


async def test_a_count_past_64_bits_is_an_error_the_model_reads_not_a_failed_rollout() -> None:
    """The state is journaled after every turn by a writer of 64-bit integers (orjson): a counter past them would
    fail the rollout there (`agent_run_error`, masked) for a number the policy chose."""
    runner = EnvRunner(SessionCounter())
    add = [{"type": "function_call", "name": "increment_counter", "arguments": '{"count": 1' + "0" * 30 + "}"}]
    outputs, state = await runner.call_tools(add, await runner.seed(ROW))
    assert "the counter holds 64-bit integers" in outputs[0]["output"] and state == {"count": 3}
    assert dumps(state)
