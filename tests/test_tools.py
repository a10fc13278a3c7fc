"""The tool decorator: schemas derived from signatures, and argument checking the model can read."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Literal

import pytest
from pydantic import BaseModel

from gym_serve import Environment, EnvRunner, tool
from gym_serve.environment.tools import ToolSpec, turn_time_left


class Box(BaseModel):
    count: int = 0


class Shop(Environment):
    State = Box

    @tool
    async def add_item(self, state: Box, sku: str, quantity: int = 1, gift: bool = False) -> dict:
        """Put an item in the cart.

        Args:
            sku: The product code.
            quantity: How many to add.
        """
        state.count += quantity
        return {"count": state.count}

    @tool
    async def pick(self, colour: Literal["red", "blue"], sizes: list[int]) -> str:
        """Choose a colour and sizes."""
        return colour

    async def not_a_tool(self) -> None: ...

    async def verify(self, task, response, state) -> float:
        return 0.0


def test_only_decorated_methods_are_tools() -> None:
    assert set(Shop.tool_specs()) == {"add_item", "pick"}


def test_schema_from_signature_and_docstring() -> None:
    schema = Shop.tool_specs()["add_item"].schema()
    assert schema["type"] == "function"
    assert schema["name"] == "add_item"
    assert schema["description"] == "Put an item in the cart."
    params = schema["parameters"]
    assert params["required"] == ["sku"]
    assert params["additionalProperties"] is False
    assert params["properties"]["sku"] == {"type": "string", "description": "The product code."}
    assert params["properties"]["quantity"]["type"] == "integer"
    assert params["properties"]["quantity"]["default"] == 1
    assert params["properties"]["gift"]["type"] == "boolean"
    assert "state" not in params["properties"], "the state parameter is injected, not shown to the model"


def test_schema_of_enums_and_lists() -> None:
    props = Shop.tool_specs()["pick"].schema()["parameters"]["properties"]
    assert props["colour"]["enum"] == ["red", "blue"]
    assert props["sizes"] == {"type": "array", "items": {"type": "integer"}, "description": ""}


def test_spec_knows_which_tools_take_state() -> None:
    specs = Shop.tool_specs()
    assert specs["add_item"].takes_state and not specs["pick"].takes_state


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"sku": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("{}", "`sku`: Field required"),
        ('{"sku": "a", "quantity": "many"}', "`quantity`"),
        ('{"sku": "a", "colour": "red"}', "`colour`: Extra inputs are not permitted"),
        ("[" * 100_000, "cannot be read: maximum recursion depth exceeded"),
        ('{"sku": "a", "quantity": ' + "9" * 5000 + "}", "cannot be read: Exceeds the limit (4300 digits)"),
    ],
)
def test_bad_arguments_give_readable_errors(arguments: str, message: str) -> None:
    with pytest.raises(ValueError, match="add_item") as info:
        Shop.tool_specs()["add_item"].parse_arguments(arguments)
    assert message in str(info.value)


async def test_arguments_no_parser_can_read_are_the_models_to_see_not_a_failed_rollout() -> None:
    """JSON nested past Python's stack raises `RecursionError`, not a `ValueError`: it must still reach the model."""
    calls = [{"call_id": "c", "name": "add_item", "arguments": "[" * 100_000}]
    outputs, state = await EnvRunner(Shop()).call_tools(calls, {"count": 0})
    assert outputs[0]["output"].startswith("Error: arguments for `add_item` cannot be read") and state == {"count": 0}


class Slow(Environment):
    tool_turn_budget_s = 0.5

    @tool
    async def wait(self, seconds: float) -> str:
        """Wait, then say so (cut at the turn's budget, as a tool that runs something slow does).

        Args:
            seconds: How long.
        """
        left = turn_time_left()
        await asyncio.sleep(seconds if left is None else min(seconds, left))
        return "waited" if left is None or seconds <= left else "cut at the turn's budget"


async def test_a_turn_of_slow_calls_ends_in_outputs_the_model_reads_not_a_failed_rollout() -> None:
    """A turn's calls share `tool_turn_budget_s`: a slow tool cuts its work at its end, and the calls after it are
    answered unrun, so a turn the policy made slow never outlives the Agent's deadline for it (a masked row)."""
    times = (0.1, 60, 0.1)
    calls = [
        {"call_id": f"c{i}", "name": "wait", "arguments": json.dumps({"seconds": s})} for i, s in enumerate(times)
    ]
    started = time.monotonic()
    outputs = (await EnvRunner(Slow()).call_tools(calls, None))[0]
    assert [o["output"] for o in outputs[:2]] == ["waited", "cut at the turn's budget"]
    assert outputs[2]["output"].startswith("Error: not run: this turn's tool calls used their 0.5 s")
    assert time.monotonic() - started < 0.5 + 1.0
    assert turn_time_left() is None  # outside a turn


def test_good_arguments_are_coerced_and_defaulted() -> None:
    parsed = Shop.tool_specs()["add_item"].parse_arguments('{"sku": "a", "quantity": 3}')
    assert parsed == {"sku": "a", "quantity": 3, "gift": False}


def test_unannotated_parameter_is_rejected_at_definition() -> None:
    async def untyped(self, city):  # noqa: ANN001
        """No types."""

    with pytest.raises(TypeError, match="`city` needs a type annotation"):
        ToolSpec.from_function(untyped)
