"""Recording an environment's examples: scripted answers played through the real environment.

Every environment's example maker (the built-in ones' `data/make_examples.py`
and `envs/_scripted_recordings.py`, a scaffolded package's `examples.py`) builds
its rows and, for each, a right and a wrong answer (the output items of each
model turn), then calls `record`. It plays every answer through the environment
(`run_local`), stops unless the right one scored 1.0 and the wrong one 0.0,
and writes the rows to `data/example.jsonl` and the episodes (with the
environment's own tool outputs and user turns) to `data/example_rollouts.jsonl`,
where the replay model finds them.
"""

from __future__ import annotations

import json
from typing import Any

from gym_serve.environment.core import Environment
from gym_serve.errors import EnvError
from gym_serve.rollout.local import run_local
from gym_serve.rollout.scripted import ScriptedModel, Turns
from gym_serve.wire.pieces import function_call

__all__ = ["Example", "Scripted", "Turns", "call", "message", "record", "says"]

Item = dict[str, Any]
Example = tuple[dict[str, Any], Turns, Turns]
"""(row, right answer's turns, wrong answer's turns)."""


def message(text: str, item_id: str = "0") -> Item:
    return {
        "type": "message",
        "id": f"msg_{item_id}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


call = function_call
"""A function call item: the scripted model calling tool `name` (`gym_serve.wire.pieces.function_call`)."""


def says(text: str) -> Turns:
    """A one-turn answer of plain text."""
    return [[message(text)]]


Scripted = ScriptedModel
"""A model that plays its turns in order, whatever it is asked (`gym_serve.rollout.scripted`)."""


async def record(env: type[Environment], examples: list[Example], config: Any = None) -> None:
    """Play, check and write the examples (see the module docstring); nothing is written if one scores wrong."""
    rows, recordings = [], []
    for i, (row, right, wrong) in enumerate(examples):
        rows.append(row)
        for turns, meant in ((right, 1.0), (wrong, 0.0)):
            rollout = await run_local(row, env(config), Scripted(turns))
            if rollout["reward"] != meant:
                raise EnvError(
                    f"{env.name()} row {i}: the {'right' if meant else 'wrong'} answer scored "
                    f"{rollout['reward']}: {rollout['response']['output'][-3:]}"
                )
            recordings.append(
                {
                    **row,
                    "response": {
                        "id": "resp_recorded",
                        "object": "response",
                        "model": "recorded",
                        "status": "completed",
                        "output": rollout["response"]["output"],
                    },
                    "reward": meant,
                }
            )
    data = env.data_dir()
    data.mkdir(parents=True, exist_ok=True)
    (data / "example.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "example_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recordings))
    print(f"{env.name()}: {len(rows)} rows, {len(recordings)} recordings")
