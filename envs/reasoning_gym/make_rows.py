"""Write reasoning-gym tasks as NeMo Gym rows, offline.

    python -m gym_serve.envs.reasoning_gym.make_rows --dataset NAME ...


    python -m gym_serve.envs.reasoning_gym.make_rows --dataset chain_sum --size 1000 --seed 42 \\
        --config '{"max_terms": 4}' --output chain_sum.jsonl

Row `i` is entry `i` of `create_dataset(NAME, **config, seed=S, size=N)`: NeMo Gym's
fields (`responses_create_params`, `question`, `answer`, `metadata`) plus what the
`reasoning_gym` environment regenerates the task from (`dataset`, the full
`dataset_config`, `index`). The prompt is a system message with one of reasoning-gym's
system prompts (by default its `default`, which asks for `<answer>...</answer>`) and
the question as the user message. Nothing is downloaded: the tasks are procedural.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .generation import SYSTEM_PROMPTS, GenerationError, generate_entry, normalize_config, to_json

__all__ = ["make_row", "make_rows", "main"]


def make_row(dataset: str, config: dict[str, Any], index: int, *, system_prompt: str | None = "default") -> dict:
    """One row: the entry at `index` of `dataset` with `config` (which must include `seed`)."""
    written = normalize_config(dataset, config)
    entry = to_json(generate_entry(dataset, written, index))
    messages = [{"role": "user", "content": entry["question"]}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": SYSTEM_PROMPTS[system_prompt]})
    return {
        "responses_create_params": {"input": messages},
        **entry,
        "dataset": dataset,
        "dataset_config": written,
        "index": index,
    }


def make_rows(
    dataset: str, *, size: int, seed: int, config: dict[str, Any] | None = None, system_prompt: str | None = "default"
) -> Iterator[dict]:
    """Rows 0..size-1 of `dataset` at `seed` (the config's `size` is `size`)."""
    full = {**(config or {}), "seed": seed, "size": size}
    for index in range(size):
        yield make_row(dataset, full, index, system_prompt=system_prompt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gym_serve.envs.reasoning_gym.make_rows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dataset", required=True, help="a reasoning-gym dataset, e.g. chain_sum")
    parser.add_argument("--size", type=int, required=True, help="how many rows (also the dataset's size)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--config", default="{}", help="other config fields as a JSON object")
    parser.add_argument("--system-prompt", default="default", choices=[*SYSTEM_PROMPTS, "none"])
    parser.add_argument("--output", type=Path, help="a .jsonl file (default: stdout)")
    args = parser.parse_args(argv)
    try:
        config = json.loads(args.config)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        parser.error(f"--config: {e}")
    if args.size < 1:
        parser.error("--size must be at least 1")
    prompt = None if args.system_prompt == "none" else args.system_prompt
    out = args.output.open("w") if args.output else sys.stdout
    try:
        for row in make_rows(args.dataset, size=args.size, seed=args.seed, config=config, system_prompt=prompt):
            out.write(json.dumps(row) + "\n")
    except GenerationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if args.output:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
