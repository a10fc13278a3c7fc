"""Math with a python tool: the tool runs in the sandbox; the final number decides the reward."""

from __future__ import annotations

from gym_serve import EnvRunner, ReplayModel, run_local
from gym_serve.wire.jsonl import read_jsonl

from . import PYTHON_BUDGET_S, MathWithTools, Spent, extract_number, same_number

ENV, CONFIG = MathWithTools, None


def test_answer_extraction_and_comparison() -> None:
    assert extract_number("so 12 apples, then \\boxed{1,389.15}") == "1389.15"
    assert extract_number("first 3, finally 42") is None  # accepted before; the last number may be the question's
    assert extract_number("A train goes 120 km in 2 hours.") is None
    assert same_number("0.5", "1/2") and same_number("1389.15", "1389.150") and not same_number("1380", "1389.15")


async def test_the_python_tool_runs_sandboxed() -> None:
    runner = EnvRunner(MathWithTools())
    calls = [
        {"type": "function_call", "name": "python", "arguments": '{"code": "print(6 * 7)"}', "call_id": "a"},
        {
            "type": "function_call",
            "name": "python",
            "arguments": '{"code": "import socket\\nsocket.create_connection((\\"1.1.1.1\\", 80), timeout=1)"}',
            "call_id": "b",
        },
        {"type": "function_call", "name": "python", "arguments": '{"code": "1/0"}', "call_id": "c"},
    ]
    outputs, _ = await runner.call_tools(calls, Spent().model_dump())
    assert outputs[0]["output"].strip() == "42"
    assert "operation not permitted" in outputs[1]["output"].lower()  # seccomp refuses `socket()`
    assert "ZeroDivisionError" in outputs[2]["output"]


async def test_episodes_are_multi_step() -> None:
    row = next(row for _, row in read_jsonl(ENV.data_dir() / "example.jsonl"))
    rollout = await run_local(row, MathWithTools(), ReplayModel.for_environment(ENV))
    assert rollout["reward"] == 1.0 and rollout["tool_calls"] == 2


async def test_a_rollouts_runs_share_a_budget_so_a_turn_cannot_outlast_the_agents_deadline() -> None:
    """Thirty 10 s runs in one turn would outlast the agent's deadline for the turn's tool calls: a masked
    `transport_timeout` the policy's own calls bought. Past the budget, a call is answered, not run."""
    runner = EnvRunner(MathWithTools())
    call = {"type": "function_call", "name": "python", "arguments": '{"code": "print(1)"}', "call_id": "a"}
    nearly = Spent(python_s=PYTHON_BUDGET_S - 1e-3).model_dump()
    outputs, state = await runner.call_tools([call, {**call, "call_id": "b"}], nearly)
    assert outputs[0]["output"].strip() == "1" and state["python_s"] > PYTHON_BUDGET_S
    assert outputs[1]["output"] == "Error: not run: this conversation's python runs have used their 120 s."
