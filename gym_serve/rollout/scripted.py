"""A model that plays scripted turns: for recording examples and for playing an environment's reward hacks.

Each turn is the output items of one model call (messages, function calls); the model plays them in
order, whatever it is asked, and says "(script ended)" past the last. `gym-serve env test` plays an
environment's `reward_hacks` with it; example makers record right and wrong answers with it.
"""

from __future__ import annotations

from typing import Any

from gym_serve.wire.pieces import assistant_message

__all__ = ["ScriptedModel", "Turns"]

Turns = list[list[dict[str, Any]]]
"""A scripted policy's episode: the output items of each of its model turns."""


class ScriptedModel:
    """Plays its turns in order, whatever it is asked."""

    def __init__(self, turns: Turns) -> None:
        self.turns = list(turns)

    async def responses(self, request: dict[str, Any], session: str | None = None) -> dict[str, Any]:
        output = self.turns.pop(0) if self.turns else [assistant_message("(script ended)", "end")]
        return {"id": "resp_scripted", "object": "response", "model": "scripted", "status": "completed",
                "output": output}  # fmt: skip
