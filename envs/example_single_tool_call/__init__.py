"""What's the weather like? One tool; the reward asks for an answer grounded in the tool's output.

The NeMo Gym quick-start task. Rows are NeMo Gym's (`responses_create_params`
with the `get_weather` tool and no task fields).

Reward:
- the model called `get_weather`: 1.0 if its final answer names the weather the
  tool reported (e.g. "cold"), else 0.0;
- it did not: 1.0 unless the answer states a weather it never looked up
  (a hallucination), as when it asks which city the user means.
"""

from __future__ import annotations

import json
import re
import zlib

from gym_serve import Environment, Response, Task, tool

CONDITIONS = ("sunny", "cold", "rainy", "windy", "warm", "foggy", "snowy", "humid")
_KNOWN = {"san francisco": "cold", "sf": "cold", "seattle": "rainy", "phoenix": "sunny", "chicago": "windy"}


def weather_in(city: str) -> str:
    """The (made-up, deterministic) weather of a city."""
    key = city.strip().lower()
    return _KNOWN.get(key) or CONDITIONS[zlib.crc32(key.encode()) % len(CONDITIONS)]


class Weather(Environment):
    @tool
    async def get_weather(self, city: str) -> dict:
        """Get the current weather in a city.

        Args:
            city: The city's name, e.g. "San Francisco".
        """
        return {"city": city, "weather_description": f"The weather in {city} is {weather_in(city)}."}

    async def verify(self, task: Task, response: Response, state: None) -> float:
        answer = response.output_text().lower()
        reported = [
            _condition(item["output"]) for item in response.output if item.get("type") == "function_call_output"
        ]
        reported = [c for c in reported if c]
        if reported:
            return 1.0 if reported[-1] in answer else 0.0
        hallucinated = any(re.search(rf"\b{c}\b", answer) for c in CONDITIONS)
        return 0.0 if hallucinated or not answer.strip() else 1.0


def _condition(output: str) -> str | None:
    try:
        description = json.loads(output)["weather_description"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None
    return description.rstrip(".").split()[-1].lower()
