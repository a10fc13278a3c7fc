"""`TaskIndex`: NeMo Gym's task numbering for identical rows, in bounded memory.

Identical raw rows share one `_ng_task_index` (numbered in order of first
appearance), and a task's rollouts continue their numbering across its rows.
That needs a table of every distinct row seen so far. Up to `in_memory` rows
it is a dict; past that it moves into a SQLite file in a temporary folder,
so a collection over millions of distinct rows keeps the driver's memory
flat (a lookup then costs microseconds, next to a rollout's milliseconds).
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from gym_serve.wire.jsonl import dumps

__all__ = ["TaskIndex"]


class TaskIndex:
    def __init__(self, in_memory: int = 100_000) -> None:
        self._in_memory = in_memory
        self._rows: dict[bytes, list[int]] = {}  # digest -> [task, next rollout]
        self._db: sqlite3.Connection | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self.tasks = 0

    def claim_row(self, row: dict[str, Any], repeats: int) -> tuple[int, int]:
        """(task index, first rollout index) of a raw input row, before any defaults are filled in.

        A row's own `_ng_task_index` stands (its rollouts are numbered from 0);
        otherwise identical rows share one task and continue its numbering.
        """
        if "_ng_task_index" in row:
            return int(row["_ng_task_index"]), 0
        return self.claim(hashlib.blake2b(dumps(row), digest_size=16).digest(), repeats)

    def claim(self, digest: bytes, repeats: int) -> tuple[int, int]:
        """(task index, first rollout index) for `repeats` more rollouts of the row with this digest."""
        if self._db is not None:
            return self._claim_on_disk(digest, repeats)
        entry = self._rows.get(digest)
        if entry is None:
            entry = self._rows[digest] = [self._new_task(), 0]
        first = entry[1]
        entry[1] += repeats
        if len(self._rows) > self._in_memory:
            self._move_to_disk()
        return entry[0], first

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def _new_task(self) -> int:
        self.tasks += 1
        return self.tasks - 1

    def _move_to_disk(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="gym-serve-tasks-")
        db = sqlite3.connect(Path(self._folder.name) / "tasks.sqlite", isolation_level=None)
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("CREATE TABLE rows (digest BLOB PRIMARY KEY, task INTEGER, next INTEGER) WITHOUT ROWID")
        db.executemany("INSERT INTO rows VALUES (?, ?, ?)", ((d, t, n) for d, (t, n) in self._rows.items()))
        self._rows = {}
        self._db = db

    def _claim_on_disk(self, digest: bytes, repeats: int) -> tuple[int, int]:
        assert self._db is not None
        found = self._db.execute("SELECT task, next FROM rows WHERE digest = ?", (digest,)).fetchone()
        if found is None:
            task, first = self._new_task(), 0
            self._db.execute("INSERT INTO rows VALUES (?, ?, ?)", (digest, task, repeats))
        else:
            (task, first) = found
            self._db.execute("UPDATE rows SET next = ? WHERE digest = ?", (first + repeats, digest))
        return task, first

    def __enter__(self) -> TaskIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
