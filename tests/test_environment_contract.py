"""The environment contract's names and types: `Environment[Task, State]`, `reset` (with `seed` as a deprecated
alias), and `state` left out by an environment that has none."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from gym_serve import Environment, EnvRunner, Response, Task


class CountTask(Task):
    start: int


class Count(BaseModel):
    n: int = 0


class Counter(Environment[CountTask, Count]):
    async def reset(self, task: CountTask) -> Count:
        return Count(n=task.start)

    async def verify(self, task: CountTask, response: Response, state: Count) -> float:
        return float(state.n)


class Stateless(Environment[CountTask, None]):
    async def verify(self, task: CountTask, response: Response) -> float:
        return 1.0


ROW = {"responses_create_params": {"input": "count"}, "start": 3}
RESPONSE = {"id": "r", "output": [], "model": "m", "created_at": 0.0, "object": "response", "status": "completed"}


async def test_the_type_arguments_are_the_task_and_state_classes() -> None:
    assert (Counter.Task, Counter.State) == (CountTask, Count)
    assert (Stateless.Task, Stateless.State) == (CountTask, None)
    runner = EnvRunner(Counter())
    assert runner.info.has_seed and await runner.seed(ROW) == {"n": 3}
    assert (await runner.verify(ROW, RESPONSE, {"n": 2}))["reward"] == 2.0
    stateless = EnvRunner(Stateless())
    assert not stateless.info.has_seed and (await stateless.verify(ROW, RESPONSE, None))["reward"] == 1.0


async def test_seed_is_a_deprecated_name_of_reset_that_still_works() -> None:
    with pytest.warns(DeprecationWarning, match="`Legacy.seed` is deprecated: name it `reset`"):

        class Legacy(Environment[CountTask, Count]):
            async def seed(self, task: CountTask) -> Count:
                return Count(n=task.start * 10)

            async def verify(self, task: CountTask, response: Response, state: Count) -> float:
                return 0.0

    assert await EnvRunner(Legacy()).seed(ROW) == {"n": 30}, "an environment written for `seed` runs unchanged"
    with pytest.warns(DeprecationWarning, match="call `reset`"):
        state = await Counter().seed(CountTask.model_validate(ROW))
    assert state == Count(n=3), "calling `seed` calls `reset`"
