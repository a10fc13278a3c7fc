"""What the trainer scripts share: recorded rollouts, the bad rollouts made from them, and catching a refusal.

The scripts run with a trainer's own Python, next to this file (so `import recorded` finds it).
"""

import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from gym_serve.errors import GymServeError
from gym_serve.wire.tokens import TOKEN_FIELDS


def load(path: str) -> list[dict[str, Any]]:
    """The rollout rows of a JSONL file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def failed(rollout: dict[str, Any]) -> dict[str, Any]:
    """The failure row gym-serve sends for this rollout's task when its attempts ran out."""
    return {**rollout, "_ng_failure_class": "model_error", "error": "503", "attempts": 3, "mask_sample": True}


def text_only(rollout: dict[str, Any]) -> dict[str, Any]:
    """The same rollout as a text-only model tier (`kind: openai`) gives it: no token ids on its items."""
    output = [{k: v for k, v in item.items() if k not in TOKEN_FIELDS} for item in rollout["response"]["output"]]
    return {**rollout, "response": {**rollout["response"], "output": output}}


async def refusal(call: Awaitable[Any]) -> str:
    """`Type: message` of the gym-serve error `call` raises; it must raise one."""
    try:
        await call
    except GymServeError as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError("the trainer took a rollout it must refuse")
