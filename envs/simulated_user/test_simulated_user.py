"""Simulated user: the scripted persona answers what it is asked; the resolution line decides the reward."""

from __future__ import annotations

from gym_serve import ReplayModel, run_local
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
