"""reasoning-gym tasks from (dataset, config, index): the same entry every time, written as JSON.

reasoning-gym's datasets are procedural: `create_dataset(name, **config)[index]` is a
function of the name, the config (its `seed` included) and the index. A row therefore
names those three, and the environment *regenerates* the entry it scores against
instead of trusting an `answer` shipped in the row, which a client could edit.

Configs travel as JSON, so each is written out in full (defaults filled in, so a
later reasoning-gym with other defaults still regenerates the same task) and read
back through the config dataclass's type hints: enums from their values, tuples from
lists, dates and times from ISO strings. A config that JSON cannot carry faithfully
(nested dataclasses: `composite`, `arc_agi`, `rearc`) is refused by name. So is a
`*_file` field naming anything but a file shipped inside reasoning-gym, so a row
cannot make the environment read an arbitrary path.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import enum
import functools
import json
import threading
import typing
from collections.abc import Mapping
from importlib import metadata, resources
from typing import Any

import reasoning_gym
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS
from reasoning_gym.utils import SYSTEM_PROMPTS

__all__ = [
    "GenerationError",
    "RG_VERSION",
    "SYSTEM_PROMPTS",
    "extract_answer",
    "generate_entry",
    "load_dataset",
    "normalize_config",
    "to_json",
]

RG_VERSION = metadata.version("reasoning-gym")


class GenerationError(ValueError):
    """Raised when a (dataset, config, index) does not name a task reasoning-gym can regenerate."""


def to_json(value: Any) -> Any:
    """`value` as plain JSON types (enums by value, tuples and sets as lists, dates as ISO strings)."""
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((to_json(v) for v in value), key=repr)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        raise TypeError(f"a nested {type(value).__name__} is not written as JSON here")
    return value


def _from_json(hint: Any, value: Any, default: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]: read as X unless null
        inner = [a for a in args if a is not type(None)]
        return value if value is None or len(inner) != 1 else _from_json(inner[0], value, default)
    if origin is typing.Literal and value not in args:
        raise ValueError(f"must be one of {', '.join(map(repr, args))}")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and issubclass(hint, datetime.date | datetime.time) and isinstance(value, str):
        return hint.fromisoformat(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        raise TypeError(f"a nested {hint.__name__} is not read from JSON here")
    if isinstance(value, list):
        item = args[0] if origin is list and args else None
        items = [_from_json(item, v, None) for v in value] if item is not None else value
        return tuple(items) if origin is tuple or hint is tuple or isinstance(default, tuple) else list(items)
    return value


def _config_class(dataset: str) -> type:
    if dataset not in DATASETS:
        close = difflib.get_close_matches(str(dataset), DATASETS, n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"reasoning-gym {RG_VERSION} has {len(DATASETS)} datasets"
        raise GenerationError(f"unknown reasoning-gym dataset `{dataset}`; {hint}")
    return DATASETS[dataset][1]


@functools.cache
def _shipped_files() -> frozenset[str]:
    files = resources.files("reasoning_gym.data").iterdir()
    return frozenset(p.name for p in files if p.is_file() and not p.name.endswith((".py", ".pyc")))


def normalize_config(dataset: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The full config of `dataset` as JSON, validated; `seed` is required (without it tasks are random)."""
    cls = _config_class(dataset)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise GenerationError(
            f"`{dataset}` config has no field {', '.join(f'`{u}`' for u in unknown)}; its fields: {', '.join(fields)}"
        )
    if not isinstance(config.get("seed"), int) or isinstance(config.get("seed"), bool):
        raise GenerationError(
            f"`{dataset}` config needs an integer `seed` (got {config.get('seed')!r}): without one "
            "reasoning-gym draws a random seed and the task cannot be regenerated"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in config.items():
        default = fields[name].default
        try:
            kwargs[name] = _from_json(hints.get(name), value, default)
        except (TypeError, ValueError) as e:
            raise GenerationError(f"`{dataset}` config field `{name}`: cannot use {value!r}: {e}") from e
        if name.endswith("_file") and kwargs[name] not in _shipped_files():
            raise GenerationError(
                f"`{dataset}` config field `{name}` must name a file shipped with reasoning-gym "
                f"({', '.join(sorted(_shipped_files()))}), got {value!r}"
            )
    try:
        built = cls(**kwargs)
        if hasattr(built, "validate"):
            built.validate()
    except (AssertionError, TypeError, ValueError) as e:
        raise GenerationError(f"`{dataset}` config is not valid: {e or type(e).__name__}") from e
    try:
        written = {f: to_json(getattr(built, f)) for f in fields}
    except TypeError as e:
        raise GenerationError(f"`{dataset}` is not supported: its config cannot be written as JSON ({e})") from e
    if not isinstance(written["size"], int) or written["size"] < 1:
        raise GenerationError(f"`{dataset}` config `size` must be a positive integer, got {written['size']!r}")
    return written


@functools.lru_cache(maxsize=64)
def _dataset(dataset: str, config_json: str) -> tuple[ProceduralDataset, threading.Lock]:
    """Built datasets, kept: some read word lists or precompute at construction."""
    cls = _config_class(dataset)
    hints, fields = typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}
    config = {k: _from_json(hints.get(k), v, fields[k].default) for k, v in json.loads(config_json).items()}
    return reasoning_gym.create_dataset(dataset, **config), threading.Lock()


def load_dataset(dataset: str, config: Mapping[str, Any]) -> ProceduralDataset:
    """The dataset built from `config` (validated; kept for reuse). Its `score_answer` scores its entries."""
    return _dataset(dataset, json.dumps(normalize_config(dataset, config), sort_keys=True))[0]


def generate_entry(dataset: str, config: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The entry (`question`, `answer`, `metadata`) at `index`, as the dataset makes it (not JSON-converted)."""
    written = normalize_config(dataset, config)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < written["size"]:
        raise GenerationError(f"`{dataset}` index must be an integer in [0, size={written['size']}), got {index!r}")
    built, lock = _dataset(dataset, json.dumps(written, sort_keys=True))
    with lock:  # a dataset may keep state between items; one item at a time
        return built[index]


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for j in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + len("\\boxed{") : j].strip()
    return None


def extract_answer(text: str) -> str | None:
    """The model's answer: the last `<answer>...</answer>` (reasoning-gym's prompts ask for it), else the last
    `\\boxed{...}`, else None.

    Never the whole text, as NeMo Gym falls back to: a default `score_answer` gives partial credit to any text
    that *contains* the answer, which would reward a ramble that happens to mention it. Found with `rfind`, not
    a regex: a degenerate `<answer><answer>...` output would make the lazy regex quadratic.
    """
    close = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, close) if close >= 0 else -1
    if start >= 0:
        return text[start + len("<answer>") : close].strip()
    return _last_boxed(text)
