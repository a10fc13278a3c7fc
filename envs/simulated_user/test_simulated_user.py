"""Simulated user: the scripted persona answers what it is asked; the resolution line decides the reward."""

from __future__ import annotations

import time

import pytest

from gym_serve import EnvRunner, ReplayModel, run_local
from gym_serve.wire.jsonl import read_jsonl

from . import Conversation, Persona, SimulatedUser, SupportTask

ENV, CONFIG = SimulatedUser, None
TASK = SupportTask(persona=Persona(facts={"order": "It's A-1.", "email": "me@x.org"}), expected=["A-1", "refund"])


def test_the_persona_reveals_only_what_is_asked() -> None:
    env, state = SimulatedUser(), Conversation()
    assert env.reply(TASK, "What is your order number?", state) == ("It's A-1.", 1)
    assert env.reply(TASK, "And the order number again?", state) == ("It's A-1.", 0)  # nothing new
    assert env.reply(TASK, "How are you?", state)[0] == TASK.persona.fallback


async def test_the_conversation_runs_until_the_resolution() -> None:
    row = next(row for _, row in read_jsonl(ENV.data_dir() / "example.jsonl"))
    rollout = await run_local(row, SimulatedUser(), ReplayModel.for_environment(ENV))
    assert rollout["reward"] == 1.0
    assert [round(r, 2) for r in rollout["step_rewards"]] == [0.1, 0.1, 0.0]
    roles = [item.get("role") for item in rollout["response"]["output"]]
    assert roles == ["assistant", "user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("text", ["\n" * 200_000, " \n" * 100_000, "\n" * 200_000 + "  RESOLUTION: refund A-1"])
async def test_a_message_of_blank_lines_is_read_in_linear_time(text: str) -> None:
    """Minutes of regex backtracking on the replica's event loop would time out every rollout on it (masked
    failures the policy's message caused); the turn is read at once, and a resolution after it still counts."""
    runner = EnvRunner(SimulatedUser())
    row = {"responses_create_params": {"input": "help"}, **TASK.model_dump()}
    said = {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}
    started = time.monotonic()
    turn, state = await runner.user_turn(row, said, Conversation().model_dump())
    assert time.monotonic() - started < 2
    assert (await runner.verify(row, said, state))["reward"] == (1.0 if "RESOLUTION" in text else 0.0)
