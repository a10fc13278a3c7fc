"""The OpenAI Agents SDK as a harness agent: an agent built with the SDK, run in-process against its session.

    agent: {kind: harness, callable: "examples.openai_agents_harness:chat_completions"}
    agent: {kind: harness, callable: "examples.openai_agents_harness:responses_streamed"}

Each is `async def run(task, endpoint, workspace)`: the SDK's own `Agent` with one function tool, its model
an `OpenAIChatCompletionsModel` (or `OpenAIResponsesModel`, streamed) on an `AsyncOpenAI` client whose base
URL and key are the rollout's gateway session. The SDK's tracing is off: it would send traces to OpenAI.
The agent asks for a tool call on its first turn (`tool_choice: required`; the SDK resets it after a tool
ran) and answers in a JSON schema (its `output_type`, which the gateway serves as structured outputs), so
even an untrained model acts, then ends its answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from gym_serve.rollout.harness import Endpoint, HarnessTask
from gym_serve.wire.harness import HarnessResult

__all__ = ["Answer", "chat_completions", "responses_streamed"]


class Answer(BaseModel):
    """The agent's final answer: the weather it found."""

    conditions: Literal["sunny", "cold", "rainy", "windy", "warm", "foggy", "snowy", "humid"]


def _agent(task: HarnessTask, model: Any) -> Any:
    from agents import Agent, ModelSettings, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city's name.
        """
        return json.dumps({"city": city, "weather_description": f"The weather in {city} is cold."})

    return Agent(
        name="weather",
        instructions=task.instructions or "Answer the user's question; look the weather up first.",
        tools=[get_weather],
        model=model,
        model_settings=ModelSettings(tool_choice="required", max_tokens=96),
        output_type=Answer,
    )


def _client(endpoint: Endpoint) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0)


async def chat_completions(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """The SDK's agent on Chat Completions, not streamed."""
    from agents import OpenAIChatCompletionsModel, Runner

    model = OpenAIChatCompletionsModel(model=endpoint.model, openai_client=_client(endpoint))
    result = await Runner.run(_agent(task, model), task.prompt, max_turns=8)
    return HarnessResult(reply=_reply(result.final_output), info={"model_calls": len(result.raw_responses)})


async def responses_streamed(task: HarnessTask, endpoint: Endpoint, workspace: Path) -> HarnessResult:
    """The SDK's agent on the Responses API, streamed (`Runner.run_streamed`)."""
    from agents import OpenAIResponsesModel, Runner

    model = OpenAIResponsesModel(model=endpoint.model, openai_client=_client(endpoint))
    result = Runner.run_streamed(_agent(task, model), task.prompt, max_turns=8)
    events = 0
    async for _ in result.stream_events():
        events += 1
    info = {"model_calls": len(result.raw_responses), "stream_events": events}
    return HarnessResult(reply=_reply(result.final_output), info=info)


def _reply(final: Any) -> str:
    return final.model_dump_json() if isinstance(final, BaseModel) else str(final or "")
