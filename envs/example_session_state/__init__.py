"""A counter per rollout: tools change it, and the reward checks where it ends up.

Rows carry `initial_count` (where the counter starts) and `expected_count`
(where it must end). The reward is 1.0 when the final count equals
`expected_count`. The counter lives in the rollout's state, which travels
with every call, so the answer is right however many replicas serve the
environment and however many rollouts run at once.
"""

from __future__ import annotations

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, tool
from gym_serve.wire.jsonl import INTEGERS


class CounterTask(Task):
    initial_count: int
    expected_count: int


class Counter(BaseModel):
    count: int = 0


class SessionCounter(Environment[CounterTask, Counter]):
    async def reset(self, task: CounterTask) -> Counter:
        return Counter(count=task.initial_count)

    @tool
    async def increment_counter(self, state: Counter, count: int) -> dict:
        """Add `count` to the counter.

        Args:
            count: How much to add.
        """
        total = state.count + count
        if not INTEGERS[0] <= total <= INTEGERS[1]:  # the state is journaled each turn, by a writer of 64-bit integers
            raise ValueError(f"the counter holds 64-bit integers; {state.count} + {count} is past them")
        state.count = total
        return {"success": True}

    @tool
    async def get_counter_value(self, state: Counter) -> dict:
        """Read the counter."""
        return {"count": state.count}

    async def verify(self, task: CounterTask, response: Response, state: Counter) -> float:
        return 1.0 if state.count == task.expected_count else 0.0
