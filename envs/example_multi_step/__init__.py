"""Several dependent tool calls: look up synonym values, then extract them in order.

Rows (NeMo Gym's format) list terms and their synonyms in the system prompt
and carry `expected_synonyms`, `expected_synonym_values` and a decoy term
(`minefield_label`, `minefield_label_value`). The model must call
`get_synonym_value` for each synonym of the term the user's query is about,
then `extract_synonym_values` with the values in the listed order.

Reward: 1.0 when the last `extract_synonym_values` call holds exactly the
expected values in the expected order, else 0.0. Also reported:
`parsed_synonym_values`, `accuracy`, `set_overlap` (fraction of expected
values present), `original_term_minefield_hit` (the decoy's value was used)
and `order_instruction_following_failure` (right values, wrong order).
"""

from __future__ import annotations

import json

from gym_serve import Environment, Response, Task, Verdict, tool
from gym_serve.wire.jsonl import INTEGERS


def synonym_value(synonym: str) -> int:
    """A synonym's value: the sum of its characters' code points (as NeMo Gym's environment computes it)."""
    return sum(ord(c) for c in synonym)


class SynonymTask(Task):
    expected_synonym_values: list[int]
    minefield_label_value: int | None = None


class SynonymExtraction(Environment[SynonymTask, None]):
    @tool
    async def get_synonym_value(self, synonym: str) -> dict:
        """Get the synonym value for a synonym.

        Args:
            synonym: The synonym to get the value for.
        """
        return {"synonym_value": synonym_value(synonym)}

    @tool
    async def extract_synonym_values(self, synonym_values: list[int]) -> dict:
        """Extract the synonym values you retrieved for the term that is relevant to the user query.

        Args:
            synonym_values: The synonym values corresponding to the term for the user query.
        """
        return {"success": True}

    async def verify(self, task: SynonymTask, response: Response) -> Verdict:
        parsed = _extracted(response)
        expected = task.expected_synonym_values
        accuracy = parsed == expected
        overlap = len(set(parsed) & set(expected)) / len(set(expected)) if expected else 0.0
        return Verdict(
            reward=1.0 if accuracy else 0.0,
            fields={
                # an integer past 64 bits as text: the rollout file's writer takes no other (the row would be lost)
                "parsed_synonym_values": [v if INTEGERS[0] <= v <= INTEGERS[1] else str(v) for v in parsed],
                "accuracy": accuracy,
                "set_overlap": overlap,
                "original_term_minefield_hit": task.minefield_label_value in parsed,
                "order_instruction_following_failure": not accuracy and sorted(parsed) == sorted(expected),
            },
        )


def _extracted(response: Response) -> list[int]:
    """The integers of the last `extract_synonym_values` call; none when its arguments cannot be read.

    The arguments are the model's text: whatever they hold (not JSON, a number past Python's 4300 digits,
    nesting past the parser's stack, `synonym_values` that is no list) is a wrong answer, never a failed rollout.
    """
    for call in reversed(response.function_calls()):
        if call.name == "extract_synonym_values":
            try:
                arguments = json.loads(call.arguments)
            except (ValueError, RecursionError):
                return []
            values = arguments.get("synonym_values") if isinstance(arguments, dict) else None
            return [v for v in values if isinstance(v, int)] if isinstance(values, list) else []
    return []
