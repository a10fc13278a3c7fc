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


async def compacting(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """A harness that compacts its history mid-rollout, as NeMo Gym's `simple_agent_with_compaction` and Claude
    Code do: after two calls it replaces the conversation with a summary of it, then goes on (two more calls)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0)
    system = {"role": "system", "content": "You are a helpful personal assistant."}
    messages: list[dict[str, Any]] = [system, {"role": "user", "content": task.prompt}]
    calls = 0

    async def ask() -> Any:
        nonlocal calls
        calls += 1
        answer = await client.chat.completions.create(model=endpoint.model, messages=messages, tools=[WEATHER_TOOL])
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        return message

    first = await ask()
    for call in first.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"weather_description": "cold"}'})
    said = (await ask()).content or ""
    summary = f"Summary so far: the user asked {task.prompt!r}; the weather is cold; you said {said!r}."
    messages = [system, {"role": "user", "content": summary + " Answer once more, briefly."}]  # compacted
    await ask()
    messages.append({"role": "user", "content": "Thanks. Anything else?"})
    last = await ask()
    return HarnessResult(reply=last.content or "", messages=messages, info={"model_calls": calls})


async def raising(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """A harness that crashes."""
    raise RuntimeError("the harness broke")


async def idle(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """A harness that answers without asking the model."""
    return HarnessResult(reply="I know this one: sunny.")


async def sleepy(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """A harness that never ends."""
    import asyncio

    await asyncio.sleep(3600)
    return HarnessResult()
