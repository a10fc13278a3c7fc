"""Writes example.jsonl and the replay recordings (one right, one wrong answer per row) for `reasoning_gym`.

One row per task family, made by `make_rows`. The right answer is the entry's own
answer in `<answer>` tags; the wrong one is a typical slip (off by one, a word
forgotten, the word not reversed). reasoning-gym gives partial credit for near
misses, so for each family the first index whose slip scores exactly 0.0 is used.
Each answer is scored by the real environment (`run_local` with a scripted model)
and the script stops if a right answer does not score 1.0.

    python envs/reasoning_gym/data/make_examples.py
"""

import asyncio
from collections.abc import Callable

from gym_serve import run_local
from gym_serve.envs.reasoning_gym import ReasoningGym
from gym_serve.envs.reasoning_gym.make_rows import make_row
from gym_serve.testing.recording import Scripted, record, says

SEED, SIZE = 2025, 100


def off_by_one(answer: str) -> str:
    return str(int(answer) + 1)


def first_word_forgotten(answer: str) -> str:
    return ", ".join(answer.split(", ")[1:])


def not_reversed(answer: str) -> str:
    return answer[::-1]


# (dataset, config without seed/size, the slip that makes the wrong answer)
FAMILIES: list[tuple[str, dict, Callable[[str], str]]] = [
    ("basic_arithmetic", {"min_terms": 2, "max_terms": 4, "max_digits": 2}, off_by_one),
    ("chain_sum", {"max_terms": 4, "max_digits": 3}, off_by_one),
    ("leg_counting", {"max_animals": 4}, off_by_one),
    ("letter_counting", {"max_words": 8}, off_by_one),
    ("word_sorting", {"max_words": 5}, first_word_forgotten),
    ("spell_backward", {}, not_reversed),
]


def answer(value: str) -> str:
    return f"Let me work through this step by step.\n<answer>{value}</answer>"


async def score(row: dict, text: str) -> dict:
    return await run_local(row, ReasoningGym(), Scripted(says(text)))


async def main() -> None:
    examples = []
    for dataset, config, slip in FAMILIES:
        for index in range(SIZE):
            row = make_row(dataset, {**config, "seed": SEED, "size": SIZE}, index)
            right, wrong = answer(row["answer"]), answer(slip(row["answer"]))
            if (await score(row, right))["reward"] != 1.0:
                raise SystemExit(f"{dataset}[{index}]: its own answer does not score 1.0")
            if (await score(row, wrong))["reward"] == 0.0:
                break
        else:
            raise SystemExit(f"{dataset}: no index in {SIZE} where `{slip.__name__}` scores 0")
        examples.append((row, says(right), says(wrong)))
    await record(ReasoningGym, examples)


if __name__ == "__main__":
    asyncio.run(main())
