"""Picking up an interrupted collection from the files it left on disk.

A collection flushes every rollout and every failure as one line, so after
a crash (even SIGKILL) the output holds whole rows plus, at worst, one
half-written last line. `load_progress` repairs the files (the broken line is
dropped, to be redone; a key written twice keeps its first row) and says
which keys are finished, which failed for good, and how many attempts the
others have used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gym_serve.collect.job import Key, rollout_key

__all__ = ["Progress", "load_progress"]


@dataclass
class Progress:
    done: set[Key] = field(default_factory=set)
    """Keys with a rollout in the output: never run again."""
    failed_for_good: set[Key] = field(default_factory=set)
    """Keys whose failure used every attempt: stay in the failures file, not run again."""
    attempts: dict[Key, int] = field(default_factory=dict)
    """Attempts already spent on keys that failed but may be tried again."""
    dropped_lines: int = 0
    """Broken or duplicate lines removed from the files."""


def load_progress(output: Path, failures: Path, max_attempts: int) -> Progress:
    """Read (and repair) the output and failures files; memory grows with keys, not with row sizes."""
    progress = Progress()

    def keep_rollout(row: dict[str, Any]) -> bool:
        key = _key(row)
        if key is None or key in progress.done:
            return False
        progress.done.add(key)
        return True

    def keep_failure(row: dict[str, Any]) -> bool:
        key = _key(row)
        if key is None or key in progress.done or key in progress.failed_for_good:
            return False  # bad-input rows are reported again when the input is read again
        spent = int(row.get("attempts", 1))
        if spent >= max_attempts:
            progress.failed_for_good.add(key)
            return True
        progress.attempts[key] = max(spent, progress.attempts.get(key, 0))
        return False

    progress.dropped_lines += _filter(output, keep_rollout)
    _filter(failures, keep_failure)
    return progress


def _key(row: dict[str, Any]) -> Key | None:
    try:
        return rollout_key(row)
    except (KeyError, TypeError, ValueError):
        return None


def _filter(path: Path, keep: Callable[[dict[str, Any]], bool]) -> int:
    """Keep the lines of `path` that parse and that `keep` accepts; returns how many were dropped.

    A line without its newline was cut off mid-write and never counts. The file
    is replaced atomically, so a crash now leaves the old file or the new one.
    """
    if not path.exists():
        return 0
    dropped = 0
    tmp = path.with_name(path.name + ".tmp")
    with path.open("rb") as source, tmp.open("wb") as target:
        for raw in source:
            try:
                row = orjson.loads(raw) if raw.endswith(b"\n") else None
            except orjson.JSONDecodeError:
                row = None
            if isinstance(row, dict) and keep(row):
                target.write(raw)
            else:
                dropped += 1
        target.flush()
        os.fsync(target.fileno())
    tmp.replace(path)
    return dropped
