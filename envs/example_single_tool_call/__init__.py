"""What's the weather like? One tool; the reward asks for an answer grounded in the tool's output.

The NeMo Gym quick-start task. Rows are NeMo Gym's (`responses_create_params`
with the `get_weather` tool and no task fields).

Reward:
- the model called `get_weather`: 1.0 if its final answer names the weather the
  tool reported (e.g. "cold"), else 0.0;
- it did not: 1.0 only when the answer asks the user where they are (which
  city or location), states no weather it never looked up (a hallucination), and is not a
  non-answer (empty, "I don't know", the question echoed back).

NeMo Gym's version pays 1.0 for any `get_weather` call, whatever the answer says
next, and 0.0 for any answer without one; here the answer must report what the
tool said, and a question for the place (when none was named) is right. Of NeMo
Gym 0.7.0's 5 recordings, the 3 with a call score the same; the 2 that ask for
the city score 0.0 there and 1.0 here (`tests/test_nemo_gym_compat.py`).
"""

from __future__ import annotations

import json
import re
import zlib

from gym_serve import Environment, Response, Task, tool
from gym_serve.verifiers.non_answer import is_non_answer

CONDITIONS = ("sunny", "cold", "rainy", "windy", "warm", "foggy", "snowy", "humid")
_KNOWN = {"san francisco": "cold", "sf": "cold", "seattle": "rainy", "phoenix": "sunny", "chicago": "windy"}
_PLACE = re.compile(r"\b(cit(y|ies)|town|location|where)\b")
_ASKING = re.compile(r"\?|\b(please|could you|can you|tell me|let me know|specify|provide|which)\b")


def weather_in(city: str) -> str:
    """The (made-up, deterministic) weather of a city."""
    key = city.strip().lower()
    return _KNOWN.get(key) or CONDITIONS[zlib.crc32(key.encode()) % len(CONDITIONS)]


class Weather(Environment[Task, None]):
    @tool
    async def get_weather(self, city: str) -> dict:
        """Get the current weather in a city.

        Args:
            city: The city's name, e.g. "San Francisco".
        """
        return {"city": city, "weather_description": f"The weather in {city} is {weather_in(city)}."}

    async def verify(self, task: Task, response: Response) -> float:
        answer = response.output_text().lower()
        reported = [
            _condition(item["output"]) for item in response.output if item.get("type") == "function_call_output"
        ]
        reported = [c for c in reported if c]
        if reported:
            return 1.0 if reported[-1] in answer else 0.0
        hallucinated = any(re.search(rf"\b{c}\b", answer) for c in CONDITIONS)
        asks_where = _PLACE.search(answer) is not None and _ASKING.search(answer) is not None
        question = task.prompt_text() if task is not None else ""
        return 1.0 if asks_where and not hallucinated and not is_non_answer(answer, question) else 0.0


def _condition(output: str) -> str | None:
    try:
        description = json.loads(output)["weather_description"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None
    return description.rstrip(".").split()[-1].lower()
