"""gym-serve's SkyRL generator on SkyRL's real interface, in SkyRL's own environment (`scripts/trainer_envs.py`).

SkyRL 0.4.0 (Python 3.12) asks its generator for one output per trajectory and checks it with
`validate_generator_output` before training: this runs `GymServeGenerator` (as a subclass of SkyRL's
`GeneratorInterface`) on SkyRL's own `GeneratorInput`, `TrajectoryID`s and `BatchMetadata`, over rollouts recorded
from gym-serve's ingress plus one failed rollout, validates with SkyRL's function and writes the output as JSON.

    PYTHONPATH=. VENV/bin/python scripts/trainer_interfaces/skyrl_real.py ROLLOUTS.jsonl TOKENIZER OTHER_TOKENIZER OUT
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from skyrl.train.generators.base import BatchMetadata, GeneratorInput, GeneratorInterface, TrajectoryID
from skyrl.train.utils.trainer_utils import validate_generator_output
from transformers import AutoTokenizer

from gym_serve.errors import GymServeError
from gym_serve.trainers.skyrl import GymServeGenerator
from gym_serve.trainers.source import RecordedRollouts
from gym_serve.wire.tokens import TOKEN_FIELDS


class GymServeSkyRLGenerator(GymServeGenerator, GeneratorInterface):
    """The adapter as SkyRL's `get_generator` annotates it: a `GeneratorInterface`."""


def batch(rollouts: list[dict[str, Any]], repeats: int) -> GeneratorInput:
    """SkyRL's input: each prompt repeated `repeats` times in a row, one trajectory id per repeat."""
    rows = [{k: v for k, v in r.items() if k in ("responses_create_params", "agent_ref")} for r in rollouts]
    tasks = rows[::repeats]
    ids = [TrajectoryID(instance_id=f"task-{i}", repetition_id=r) for i in range(len(tasks)) for r in range(repeats)]
    return GeneratorInput(
        prompts=[t["responses_create_params"]["input"] for t in tasks for _ in range(repeats)],
        env_classes=["gym_serve"] * len(ids),
        env_extras=[{"gym_serve_row": t} for t in tasks for _ in range(repeats)],
        sampling_params={"temperature": 1.0},
        trajectory_ids=ids,
        batch_metadata=BatchMetadata(global_step=0, training_phase="train"),
    )


async def error_of(generator: GymServeGenerator, given: GeneratorInput) -> str:
    try:
        await generator.generate(given)
    except GymServeError as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError("the generator took a rollout it must refuse")


async def main(rollouts_file: str, tokenizer_path: str, other_tokenizer_path: str, out: str) -> None:
    lines = Path(rollouts_file).read_text().splitlines()
    rollouts = [json.loads(line) for line in lines if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    failed = {**rollouts[-1], "_ng_failure_class": "model_error", "error": "503", "attempts": 3}
    recorded = [*rollouts[:-1], failed]  # the last trajectory failed after gym-serve's retries

    def generator(rows: list[dict[str, Any]], tokenizer: Any = tokenizer, limit: int = 512) -> GymServeGenerator:
        source = RecordedRollouts(rows)
        return GymServeSkyRLGenerator(
            lambda: source, eos_token_id=tokenizer.eos_token_id, tokenizer=tokenizer, max_prompt_length=limit
        )

    given = batch(rollouts, repeats=2)
    output = await generator(recorded).generate(given)
    validate_generator_output(len(given["prompts"]), output)  # SkyRL's own check, as its trainer runs it

    text_only = {**rollouts[0], "response": {**rollouts[0]["response"], "output": [
        {k: v for k, v in item.items() if k not in TOKEN_FIELDS} for item in rollouts[0]["response"]["output"]
    ]}}  # fmt: skip
    other = AutoTokenizer.from_pretrained(other_tokenizer_path)
    errors = {
        "no_token_ids": await error_of(generator([text_only, *rollouts[1:]]), given),
        "tokenizer": await error_of(generator(rollouts, other), given),
        "prompt_too_long": await error_of(generator(rollouts, limit=4), given),
    }
    output["trajectory_ids"] = [[t.instance_id, t.repetition_id] for t in output["trajectory_ids"]]
    Path(out).write_text(json.dumps({"received": output, "errors": errors}))
    print("ok: SkyRL validated gym-serve's generator output; rewards", output["rewards"])


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
