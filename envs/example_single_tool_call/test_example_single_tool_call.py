"""Weather: grounded answers score 1, answers that contradict or invent the weather score 0."""

from __future__ import annotations

import json

from gym_serve import Response

from . import Weather, weather_in


def episode(*items: dict) -> Response:
    return Response.model_validate({"output": list(items)})


def answer(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def looked_up(city: str) -> list[dict]:
    description = f"The weather in {city} is {weather_in(city)}."
    return [
        {"type": "function_call", "name": "get_weather", "arguments": json.dumps({"city": city}), "call_id": "c"},
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": json.dumps({"city": city, "weather_description": description}),
        },
    ]


async def test_verify_right_and_wrong() -> None:
    env = Weather()
    assert weather_in("San Francisco") == "cold"
    assert await env.verify(None, episode(*looked_up("San Francisco"), answer("It's cold, bring a jacket."))) == 1
    assert await env.verify(None, episode(*looked_up("San Francisco"), answer("Sunny and warm!"))) == 0
    assert await env.verify(None, episode(answer("It is sunny in SF."))) == 0, "weather it never looked up"
    assert await env.verify(None, episode(answer("Which city do you mean?"))) == 1


async def test_tool_reports_the_city_weather() -> None:
    result = await Weather().get_weather("Seattle")
    assert result == {"city": "Seattle", "weather_description": "The weather in Seattle is rainy."}
