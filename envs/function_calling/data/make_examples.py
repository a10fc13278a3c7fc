"""Writes example.jsonl and the replay recordings (one right, one wrong answer per row) for `function_calling`.

Rows follow NeMo Gym's `xlam_fc` (its system prompt, Responses-style `tools`, `expected_answers`).
Each recording is first played through the real environment (`run_local`) and must score the
reward it was written for (1.0 right, 0.0 wrong), else nothing is written.

    python envs/function_calling/data/make_examples.py
"""

import asyncio

from gym_serve.envs.function_calling import FunctionCalling
from gym_serve.testing.recording import call, message, record

SYSTEM_PROMPT = (
    "You are a helpful AI assistant with access to various functions. When you need to use a function "
    "to answer a user's request, call the appropriate function with the correct arguments. You can call "
    "multiple functions if needed to fully address the user's query."
)


def tool(name: str, description: str, properties: dict, required: list[str] | None = None) -> dict:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required if required is not None else list(properties),
            "additionalProperties": False,
        },
    }


WEATHER = tool(
    "get_weather",
    "Current weather in a city.",
    {
        "city": {"type": "string", "description": "City name."},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
    },
    ["city"],
)
CONVERT = tool(
    "convert_currency",
    "Convert an amount between currencies.",
    {"amount": {"type": "number"}, "from_currency": {"type": "string"}, "to_currency": {"type": "string"}},
)
FLIGHTS = tool(
    "search_flights",
    "Search flights.",
    {
        "origin": {"type": "string"},
        "destination": {"type": "string"},
        "date": {"type": "string", "description": "YYYY-MM-DD"},
        "adults": {"type": "integer"},
    },
)
HOTEL = tool("book_hotel", "Book a hotel room.", {"city": {"type": "string"}, "nights": {"type": "integer"}})
EVENT = tool(
    "create_event",
    "Create a calendar event.",
    {
        "title": {"type": "string"},
        "start": {"type": "string", "description": "ISO 8601 date-time"},
        "attendees": {"type": "array", "items": {"type": "string"}},
        "reminder": {"type": "object", "properties": {"minutes_before": {"type": "integer"}}},
    },
    ["title", "start"],
)
ALARM = tool("set_alarm", "Set an alarm.", {"time": {"type": "string", "description": "HH:MM, 24h"}})
DOCS = tool(
    "search_docs",
    "Search the documentation.",
    {"query": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
    ["query"],
)


def c(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


# (question, tools, expected calls, right answer, wrong answer); an answer is a list of calls or a text.
EXAMPLES = [
    (
        "What's the weather in Lisbon right now, in fahrenheit?",
        [WEATHER],
        [c("get_weather", city="Lisbon", unit="fahrenheit")],
        [c("get_weather", unit="fahrenheit", city="Lisbon")],
        [c("get_weather", city="Lisbon")],
    ),  # the default unit is celsius: wrong
    (
        "Convert 100 USD to EUR and 50 GBP to JPY.",
        [CONVERT, WEATHER],
        [
            c("convert_currency", amount=100, from_currency="USD", to_currency="EUR"),
            c("convert_currency", amount=50, from_currency="GBP", to_currency="JPY"),
        ],
        [
            c("convert_currency", amount=50.0, from_currency="GBP", to_currency="JPY"),  # parallel, other order
            c("convert_currency", amount=100, from_currency="USD", to_currency="EUR"),
        ],
        [c("convert_currency", amount=100, from_currency="USD", to_currency="EUR")],
    ),  # one call missing
    (
        "Find flights from Berlin to Rome on 2025-06-01 for 2 adults.",
        [WEATHER, FLIGHTS, HOTEL],
        [c("search_flights", origin="Berlin", destination="Rome", date="2025-06-01", adults=2)],
        [c("search_flights", adults=2, date="2025-06-01", destination="Rome", origin="Berlin")],
        [c("book_hotel", city="Rome", nights=2)],
    ),  # the wrong function
    (
        "Put 'Design review' on my calendar for 2025-05-20T14:00 with ana@example.com and li@example.com, "
        "and remind me 15 minutes before.",
        [EVENT],
        [
            c(
                "create_event",
                title="Design review",
                start="2025-05-20T14:00",
                attendees=["ana@example.com", "li@example.com"],
                reminder={"minutes_before": 15},
            )
        ],
        [
            c(
                "create_event",
                title="Design review",
                start="2025-05-20T14:00",
                attendees=["ana@example.com", "li@example.com"],
                reminder={"minutes_before": 15},
            )
        ],
        [
            c(
                "create_event",
                title="Design review",
                start="2025-05-20T14:00",
                attendees=["ana@example.com", "li@example.com"],
                reminder={"minutes_before": 15},
                location="Room 4",
            )
        ],
    ),
    (
        "Set alarms for 06:30, 07:00 and 07:30.",
        [ALARM],
        [c("set_alarm", time="06:30"), c("set_alarm", time="07:00"), c("set_alarm", time="07:30")],
        [c("set_alarm", time="07:30"), c("set_alarm", time="06:30"), c("set_alarm", time="07:00")],
        [
            c("set_alarm", time="06:30"),
            c("set_alarm", time="07:00"),
            c("set_alarm", time="07:30"),
            c("set_alarm", time="08:00"),
        ],
    ),  # one call too many
    (
        "Search the docs for 'ray serve autoscaling'.",
        [DOCS],
        [c("search_docs", query="ray serve autoscaling", limit=10)],
        [c("search_docs", query="ray serve autoscaling")],  # the default limit may be left out
        [c("search_docs", query="ray serve autoscaling", limit=5)],
    ),
    (
        "Tell me a short joke about databases.",
        [WEATHER],
        [],  # nothing to call: the right answer is text
        "Why did the database administrator leave his wife? She had one-to-many relationships.",
        [c("get_weather", city="London")],
    ),
]


def output(answer: list[dict] | str) -> list[dict]:
    """A turn's items: a text answer, or the function calls."""
    if isinstance(answer, str):
        return [message(answer)]
    return [call(c["name"], c["arguments"], f"call_{k}") for k, c in enumerate(answer)]


def main() -> None:
    examples = []
    for i, (question, tools, expected, right, wrong) in enumerate(EXAMPLES):
        row = {
            "id": i,
            "responses_create_params": {
                "input": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}],
                "tools": tools,
            },
            "expected_answers": expected,
        }
        examples.append((row, [output(right)], [output(wrong)]))
    asyncio.run(record(FunctionCalling, examples))


if __name__ == "__main__":
    main()
