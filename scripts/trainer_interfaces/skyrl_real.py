"""gym-serve's SkyRL generator on SkyRL's real interface, in SkyRL's own environment (`scripts/trainer_envs.py`).

SkyRL 0.4.0 (Python 3.12) asks its generator for one output per trajectory and checks it with
`validate_generator_output` before training: this runs `GymServeGenerator` (as a subclass of SkyRL's
`GeneratorInterface`) on SkyRL's own `GeneratorInput`, `TrajectoryID`s and `BatchMetadata`, over rollouts recorded
from gym-serve's ingress plus one failed rollout, validates with SkyRL's function and writes the output as JSON.

    PYTHONPATH=scripts/source_tree:. VENV/bin/python \
        scripts/trainer_interfaces/skyrl_real.py ROLLOUTS.jsonl TOKENIZER OTHER_TOKENIZER OUT
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import recorded
from skyrl.train.generators.base import BatchMetadata, GeneratorInput, GeneratorInterface, TrajectoryID
from skyrl.train.utils.trainer_utils import validate_generator_output
from transformers import AutoTokenizer

from gym_serve.trainers.skyrl import GymServeGenerator
from gym_serve.trainers.source import RecordedRollouts


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


async def main(rollouts_file: str, tokenizer_path: str, other_tokenizer_path: str, out: str) -> None:
    rollouts = recorded.load(rollouts_file)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    with_a_failure = [*rollouts[:-1], recorded.failed(rollouts[-1])]  # the last one failed after gym-serve's retries

    def generator(rows: list[dict[str, Any]], tokenizer: Any = tokenizer, limit: int = 512) -> GymServeGenerator:
        source = RecordedRollouts(rows)
        return GymServeSkyRLGenerator(
            lambda: source, eos_token_id=tokenizer.eos_token_id, tokenizer=tokenizer, max_prompt_length=limit
        )

    given = batch(rollouts, repeats=2)
    output = await generator(with_a_failure).generate(given)
    validate_generator_output(len(given["prompts"]), output)  # SkyRL's own check, as its trainer runs it

    other = AutoTokenizer.from_pretrained(other_tokenizer_path)
    errors = {
        "no_token_ids": await recorded.refusal(
            generator([recorded.text_only(rollouts[0]), *rollouts[1:]]).generate(given)
        ),
        "tokenizer": await recorded.refusal(generator(rollouts, other).generate(given)),
        "prompt_too_long": await recorded.refusal(generator(rollouts, limit=4).generate(given)),
    }
    output["trajectory_ids"] = [[t.instance_id, t.repetition_id] for t in output["trajectory_ids"]]
    Path(out).write_text(json.dumps({"received": output, "errors": errors}))
    print("ok: SkyRL validated gym-serve's generator output; rewards", output["rewards"])


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
