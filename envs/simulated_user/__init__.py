"""Customer support with a simulated user: ask for what you need, then resolve the case.

The user is a scripted persona (no model needed, so rollouts are
reproducible): each row's `persona` holds an opening complaint, `facts` the
user reveals only when the assistant asks about them (keyword → reply), and
`expected` the facts a correct resolution must contain. The assistant talks
in plain messages; every message goes to the persona through the `user_turn`
hook, which answers the questions it recognises. The conversation ends when
the assistant writes a line `RESOLUTION: ...`, or after `max_turns`.

Per-step reward: +0.1 for each turn whose question revealed a new fact.
Final reward: 1.0 when the resolution line names every `expected` value
(e.g. the order id and the action `refund`), else 0.0. Real persona data
(e.g. tau-bench's user scenarios) fits the same row shape; a model-driven user
would replace `reply` with a call to a model deployment.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, Turn


class Persona(BaseModel):
    facts: dict[str, str]
    """Keyword (e.g. `order`) → what the user says when asked about it."""
    fallback: str = "I'm not sure what you need from me. Can you ask more specifically?"


class SupportTask(Task):
    persona: Persona
    expected: list[str]
    """Values the `RESOLUTION:` line must contain, e.g. the order id and `refund`."""
    max_turns: int = 6


class Conversation(BaseModel):
    revealed: list[str] = []
    turns: int = 0
    resolution: str | None = None


def resolution_of(text: str) -> str | None:
    """The last `RESOLUTION:` line's text. Indentation is read within the line (`[^\\S\\n]*`): a `\\s*` there
    crosses newlines, which is quadratic on a message of blank lines (minutes for 100,000 of them, with the
    replica's event loop stalled and every rollout on it timing out)."""
    found = re.findall(r"^[^\S\n]*RESOLUTION:\s*(.+)$", text, re.M | re.I)
    return found[-1].strip() if found else None


class SimulatedUser(Environment[SupportTask, Conversation]):
    def reply(self, task: SupportTask, message: str, state: Conversation) -> tuple[str, int]:
        """The persona's answer to the assistant's message, and how many new facts it revealed."""
        asked = [key for key in task.persona.facts if re.search(rf"\b{re.escape(key)}", message, re.I)]
        if not asked:
            return task.persona.fallback, 0
        new = [key for key in asked if key not in state.revealed]
        state.revealed.extend(new)
        return " ".join(task.persona.facts[key] for key in asked), len(new)

    async def user_turn(self, task: SupportTask, response: Response, state: Conversation) -> Turn:
        message = response.output_text()
        state.turns += 1
        resolution = resolution_of(message)
        if resolution is not None:
            state.resolution = resolution
            return Turn(message=None, reward=0.0, terminated=True)
        text, new_facts = self.reply(task, message, state)
        return Turn(message=text, reward=0.1 * new_facts, terminated=state.turns >= task.max_turns)

    async def verify(self, task: SupportTask, response: Response, state: Conversation) -> float:
        if state.resolution is None:
            return 0.0
        resolution = state.resolution.lower()
        return 1.0 if all(value.lower() in resolution for value in task.expected) else 0.0
