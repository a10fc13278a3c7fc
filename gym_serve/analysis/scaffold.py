"""`gym-serve env init NAME`: a new environment as a package of its own, passing `gym-serve env test` as written.

The package holds what a reviewer asks of every environment: the class
(`NAME/__init__.py`), its example rows and the replay model's recordings of a
right and a wrong answer to each (`NAME/data/`, written by `NAME/examples.py`,
which plays the scripted answers through the environment), its Serve config
(`NAME/NAME.yaml`), tests of the verifier against non-answers and forgeries
(`tests/`), and a `pyproject.toml` that declares its own dependencies and
registers it with gym-serve under the entry-point group `gym_serve.environments`.
After `pip install -e DIR` it is found by name like a built-in environment.

The task is a small one with a tool (count a letter in a word), so the author
starts from every moving part and replaces them.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from string import Template

from gym_serve.environment.registry import ENTRY_POINT_GROUP, available_environments
from gym_serve.errors import ConfigError

__all__ = ["distribution_name", "scaffold"]


def distribution_name(name: str) -> str:
    """`letter_count` → `gym-serve-letter-count`: the package's distribution, and its folder's default name.

    The folder is not named like the import package: a folder `letter_count/` without an `__init__.py`
    on `sys.path` (the current directory, for `python -m` or pytest) would be imported as an empty
    namespace package instead of the installed environment.
    """
    return "gym-serve-" + name.replace("_", "-")


def scaffold(name: str, directory: Path) -> list[Path]:
    """Write the package for environment `name` into `directory` and record its examples; returns the files."""
    _check_name(name)
    if directory.exists() and any(directory.iterdir()):
        raise ConfigError(f"`{directory}` exists and is not empty; pick another folder with --dir", key="--dir")
    fields = {
        "name": name,
        "cls": "".join(part.capitalize() for part in name.split("_")),
        "dist": distribution_name(name),
        "group": ENTRY_POINT_GROUP,
    }
    written = []
    for relative, template in _FILES.items():
        path = directory / Template(relative).substitute(fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template).substitute(fields))
        written.append(path)
    written += _record(name, directory)
    return written


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ConfigError(
            f"`{name}` cannot name an environment package: use lowercase letters, digits and `_`, starting with a "
            "letter (e.g. `letter_count`)",
            key="NAME",
        )
    if name in available_environments():
        raise ConfigError(f"an environment named `{name}` exists already (`gym-serve list`)", key="NAME")
    if importlib.util.find_spec(name) is not None:
        raise ConfigError(f"a Python module named `{name}` exists already; the package needs its own name", key="NAME")


def _record(name: str, directory: Path) -> list[Path]:
    """Run the new package's `examples.py` in this process: its data files come from the environment itself."""
    sys.path.insert(0, str(directory))
    try:
        importlib.import_module(f"{name}.examples").main()
    finally:
        sys.path.remove(str(directory))
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]
    data = directory / name / "data"
    return [data / "example.jsonl", data / "example_rollouts.jsonl"]


_PYPROJECT = """\
# $name: a gym-serve environment, installable on its own with its own dependencies.
# `pip install -e .` registers it with gym-serve (the entry point below); then `gym-serve env test $name`.
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "$name: an RL environment for gym-serve"
requires-python = ">=3.11"
dependencies = [
    "gym-serve",
    # the environment's own dependencies go here
]

[project.optional-dependencies]
test = ["pytest>=8", "pytest-asyncio>=1.0"]

[project.entry-points."$group"]
$name = "$name:$cls"

[tool.setuptools]
packages = ["$name"]

[tool.setuptools.package-data]
$name = ["*.yaml", "data/*.jsonl"]

[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
"""

_README = """\
# $name

A gym-serve environment: how many times does a letter occur in a word? The model may call
`count_letter`; the reward is 1.0 when its answer is exactly the right number.

    pip install -e .                    # registers `$name` with gym-serve (entry point `$group`)
    gym-serve env test $name            # rows, recordings, and every row through Serve
    pytest tests                        # the verifier against right answers, wrong ones and forgeries
    gym-serve up $name/$name.yaml       # serve it: POST a row to http://127.0.0.1:8000/$name

Make it yours: the task fields and tools in `$name/__init__.py`, the rows and scripted answers in
`$name/examples.py` (then `python -m $name.examples` records them again), the tests in `tests/`.
"""

_INIT = '''\
"""$name: how many times does a letter occur in a word? (Made by `gym-serve env init`: make it yours.)

Rows carry the task fields `word`, `letter` and `expected` (the count). The model may call
`count_letter`; the reward is 1.0 when its answer holds exactly one number and that number is the
count, else 0.0 (so hedging with several numbers earns nothing). After changing the environment or
its examples, `python -m $name.examples` records the examples again.
"""

from __future__ import annotations

import re

from gym_serve import Environment, Response, Task, tool


class ${cls}Task(Task):
    """The row fields `verify` reads; every other field of a row passes through untouched."""

    word: str
    letter: str
    expected: int


class $cls(Environment[${cls}Task, None]):

    @tool
    async def count_letter(self, word: str, letter: str) -> dict:
        """Count how many times a letter occurs in a word.

        Args:
            word: The word to look in.
            letter: The letter to count.
        """
        return {"word": word, "letter": letter, "count": word.lower().count(letter.lower())}

    async def verify(self, task: ${cls}Task, response: Response) -> float:
        numbers = re.findall(r"-?\\d+", response.output_text())
        return 1.0 if len(numbers) == 1 and int(numbers[0]) == task.expected else 0.0
'''

_EXAMPLES = '''\
"""The example rows of `$name`, with a right and a wrong answer to each.

`python -m $name.examples` plays every answer through the environment and writes
`data/example.jsonl` (the rows) and `data/example_rollouts.jsonl` (the replay model's
recordings); it stops, writing nothing, if an answer does not score what it should.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gym_serve.testing.recording import Example, call, message, record

from $name import $cls

WORDS = [
    ("strawberry", "r", 3),
    ("banana", "a", 3),
    ("mississippi", "s", 4),
    ("committee", "t", 2),
    ("bookkeeper", "e", 3),
]


def examples() -> list[Example]:
    items = []
    for i, (word, letter, count) in enumerate(WORDS):
        row: dict[str, Any] = {
            "responses_create_params": {
                "input": [
                    {"role": "system", "content": "Answer with one number. You may call count_letter."},
                    {"role": "user", "content": f'How many times does the letter "{letter}" occur in "{word}"?'},
                ]
            },
            "word": word,
            "letter": letter,
            "expected": count,
        }
        right = [[call("count_letter", {"word": word, "letter": letter}, f"call_{i}")], [message(str(count), f"{i}r")]]
        wrong = [[message(str(count + 1), f"{i}w")]]  # a guess, without the tool
        items.append((row, right, wrong))
    return items


def main() -> None:
    asyncio.run(record($cls, examples()))


if __name__ == "__main__":
    main()
'''

_CONFIG = """\
# $name's Serve config. `gym-serve env test $name` deploys it (with the replay model playing the
# recorded right and wrong answers); `gym-serve up $name/$name.yaml` or `serve run $name/$name.yaml`
# serves it: POST an input row to http://127.0.0.1:8000/$name to get a rollout row back.
applications:
- name: $name
  route_prefix: /$name
  import_path: gym_serve.deployments.app:build_app
  args:
    environment: {name: $name}
    agent: {max_steps: 4}
    model: {kind: replay}   # a real model: {kind: openai, model: gpt-4.1-mini} (key from $$OPENAI_API_KEY)
  deployments:
  - name: Agent
    ray_actor_options: {num_cpus: 0}
  - name: Environment
    ray_actor_options: {num_cpus: 0}
  - name: Model
    ray_actor_options: {num_cpus: 0}
"""

_TEST = '''\
"""$name: the verifier against right answers, wrong ones and forgeries; the recordings replay to their rewards."""

from __future__ import annotations

from gym_serve import Response
from gym_serve.testing.fixtures import replay_examples

from $name import $cls, ${cls}Task

TASK = ${cls}Task(word="banana", letter="a", expected=3)


def answer(text: str) -> Response:
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return Response.model_validate({"output": [message]})


async def test_the_right_count_scores_1() -> None:
    for text in ("3", "There are 3."):
        assert await $cls().verify(TASK, answer(text)) == 1.0, text


async def test_wrong_counts_hedges_and_non_answers_score_0() -> None:
    for text in ("2", "3 or 4", "2, no, 3", "", "three", "I cannot count."):
        assert await $cls().verify(TASK, answer(text)) == 0.0, text


async def test_the_tool_counts_case_blind() -> None:
    assert await $cls().count_letter("Banana", "A") == {"word": "Banana", "letter": "A", "count": 3}


async def test_every_example_replays_to_its_recorded_reward() -> None:
    examples = await replay_examples($cls)
    assert len(examples) >= 5
    for row, right, wrong in examples:
        assert (right["reward"], wrong["reward"]) == (1.0, 0.0), row["word"]
'''

_FILES = {
    "pyproject.toml": _PYPROJECT,
    "README.md": _README,
    "$name/__init__.py": _INIT,
    "$name/examples.py": _EXAMPLES,
    "$name/$name.yaml": _CONFIG,
    "tests/test_$name.py": _TEST,
}
