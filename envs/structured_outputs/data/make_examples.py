"""Writes example.jsonl and the replay recordings (one right, one wrong answer per row) for `structured_outputs`.

Each recording is first played through the real environment (`run_local`) and must score the
reward it was written for (1.0 right, 0.0 wrong), else nothing is written.

    python envs/structured_outputs/data/make_examples.py
"""

import asyncio
import json

from gym_serve.envs.structured_outputs import StructuredOutputs
from gym_serve.testing.recording import record, says


def obj(properties: dict, **extra) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        **extra,
    }


STRING, INTEGER, NUMBER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}

EXAMPLES = [
    (  # bare JSON right; a missing required property wrong
        "Dr. Lena Ortiz (lena.ortiz@example.org, +34 600 123 456) is the new head of the cardiology unit.",
        obj({"name": STRING, "email": {"type": "string", "format": "email"}, "phone": STRING, "role": STRING}),
        '{"name": "Lena Ortiz", "email": "lena.ortiz@example.org", "phone": "+34 600 123 456", '
        '"role": "head of the cardiology unit"}',
        '{"name": "Lena Ortiz", "email": "lena.ortiz@example.org", "role": "head of cardiology"}',
    ),
    (  # bare JSON right; a price as a string (nested path), in a fence inside prose, wrong
        "Order 5521: two notebooks at 3.50 each and one fountain pen at 24.90. Paid by card.",
        obj(
            {
                "order_id": INTEGER,
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": obj(
                        {"product": STRING, "quantity": {"type": "integer", "minimum": 1}, "unit_price": NUMBER}
                    ),
                },
                "payment": {"type": "string", "enum": ["card", "cash", "transfer"]},
            }
        ),
        '{"order_id": 5521, "items": [{"product": "notebook", "quantity": 2, '
        '"unit_price": 3.5}, {"product": "fountain pen", "quantity": 1, "unit_price": 24.9}], "payment": "card"}',
        'Here is the order:\n```json\n{"order_id": 5521, "items": [{"product": "notebook", "quantity": 2, '
        '"unit_price": 3.5}, {"product": "fountain pen", "quantity": 1, "unit_price": "24.90"}], "payment": "card"}\n```',
    ),
    (  # enum and date format right; a trailing comma (parse error) wrong
        "The quarterly review is scheduled for 2025-03-14 in room B2; it has been confirmed by all attendees.",
        obj(
            {
                "event": STRING,
                "date": {"type": "string", "format": "date"},
                "room": STRING,
                "status": {"type": "string", "enum": ["tentative", "confirmed", "cancelled"]},
            }
        ),
        '{"event": "quarterly review", "date": "2025-03-14", "room": "B2", "status": "confirmed"}',
        '{"event": "quarterly review", "date": "2025-03-14", "room": "B2", "status": "confirmed",}',
    ),
    (  # bare JSON right; an extra property (strict schemas forbid it) after prose wrong
        "Pancakes: 200 g flour, 2 eggs, 300 ml milk. Serves 4; takes 20 minutes.",
        obj(
            {
                "dish": STRING,
                "servings": INTEGER,
                "minutes": INTEGER,
                "ingredients": {"type": "array", "items": STRING, "minItems": 1},
            }
        ),
        '{"dish": "pancakes", "servings": 4, "minutes": 20, "ingredients": ["200 g flour", "2 eggs", "300 ml milk"]}',
        'Sure. The recipe as JSON: {"dish": "pancakes", "servings": 4, "minutes": 20, '
        '"ingredients": ["200 g flour", "2 eggs", "300 ml milk"], "notes": "add sugar to taste"} Enjoy!',
    ),
    (  # a top-level array right; an object where an array is required wrong
        "Sensor log: at 08:00 the probe read 21.5 C (ok); at 09:00 it read 27.1 C (alarm).",
        {
            "type": "array",
            "items": obj(
                {"time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}, "celsius": NUMBER, "alarm": BOOLEAN}
            ),
        },
        '[{"time": "08:00", "celsius": 21.5, "alarm": false}, {"time": "09:00", "celsius": 27.1, "alarm": true}]',
        '{"readings": [{"time": "08:00", "celsius": 21.5, "alarm": false}, '
        '{"time": "09:00", "celsius": 27.1, "alarm": true}]}',
    ),
    (  # bare JSON right; the same JSON in a fence after a draft wrong (NeMo Gym: the whole answer must be JSON)
        "'The Left Hand of Darkness' by Ursula K. Le Guin (born 1929) was published in 1969.",
        obj({"title": STRING, "year": INTEGER, "author": obj({"name": STRING, "born": INTEGER})}),
        '{"title": "The Left Hand of Darkness", "year": 1969, "author": {"name": "Ursula K. Le Guin", "born": 1929}}',
        'Draft:\n```json\n{"title": "The Left Hand of Darkness", "year": 1969, "author": {"name": "Ursula K. Le Guin", '
        '"born": 1929}}\n```\nFinal:\n```json\n{"title": "The Left Hand of Darkness", "year": 1969, '
        '"author": {"name": "Ursula K. Le Guin", "born": "1929"}}\n```',
    ),
]


def prompt(document: str, schema: dict) -> str:
    return (
        f"# Document:\n{document}\n\n# Instructions:\nExtract the document's facts as JSON that validates "
        f"against this JSON schema (every property is required; add no others):\n{json.dumps(schema)}"
    )


def main() -> None:
    examples = []
    for document, schema, right, wrong in EXAMPLES:
        properties = schema.get("properties", schema.get("items", {}).get("properties", {}))
        row = {
            "responses_create_params": {"input": [{"role": "user", "content": prompt(document, schema)}]},
            "schema_str": json.dumps(schema),
            "schema_type": "json",
            "schema_fields_count": str(len(properties)),
        }
        examples.append((row, says(right), says(wrong)))
    asyncio.run(record(StructuredOutputs, examples))


if __name__ == "__main__":
    main()
