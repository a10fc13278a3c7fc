"""In-process harnesses the tests run (`agent: {kind: harness, callable: tests.harnesses:NAME}`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gym_serve.rollout.harness import Endpoint, HarnessTask
from gym_serve.wire.harness import HarnessResult

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


async def chat_weather(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """A plain Chat Completions tool loop on the official `openai` client."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
    for _ in range(4):
        answer = await client.chat.completions.create(model=endpoint.model, messages=messages, tools=[WEATHER_TOOL])
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return HarnessResult(reply=message.content or "", messages=messages)
        for call in message.tool_calls:
            city = json.loads(call.function.arguments).get("city", "")
            report = {"city": city, "weather_description": f"The weather in {city} is cold."}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(report)})
    return HarnessResult(reply="", messages=messages)
