"""A file collection's journal: every completed turn of every unfinished rollout, so a killed collection resumes
its rollouts mid-way instead of from their first turn.

`<out>_journal.jsonl` beside the output holds one line per completed turn: the rollout's key, the turn's
record (`gym_serve.rollout.checkpoint`: its new items with their token bundles, the state after it, the
sandbox snapshot id) and a digest of the line's content. Lines are appended and flushed as turns complete,
as the output's rows are; a rollout's lines become obsolete once its row is in the output, and the journal
is removed when a collection ends with nothing left to retry.

`load_journal` reads it back on `--resume`: each unfinished rollout's records folded into the checkpoint it
goes on from. What a crash can leave is handled line by line: a torn last line (no newline), a line that does
not parse, or one whose digest does not match its content is skipped, and so is every later line of the same
rollout once one of its turns is missing (the rollout then goes on from its last intact turn). The journal is
rewritten with what was kept, and `Journal.skipped` says what was left out, by line, for the summary.
Finished rollouts live in the output file, never only here: nothing in the journal can lose one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gym_serve.collect.job import Key
from gym_serve.rollout.checkpoint import Checkpoint, digest
from gym_serve.wire.jsonl import JsonlWriter

__all__ = ["Journal", "JournalWriter", "load_journal"]


@dataclass
class Journal:
    """What `load_journal` found: where each unfinished rollout goes on from, and what it could not use."""

    checkpoints: dict[Key, Checkpoint] = field(default_factory=dict)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    """(line, why) of every line left out: torn, not JSON, its digest wrong, or after a missing turn."""

    @property
    def turns(self) -> int:
        return sum(checkpoint.turn for checkpoint in self.checkpoints.values())


class JournalWriter:
    """Appends each completed turn to the journal (flushed per line, as the output is)."""

    def __init__(self, path: Path) -> None:
        self._writer = JsonlWriter(path)

    def __call__(self, key: Key, record: dict[str, Any]) -> None:
        entry = {"key": list(key), "record": record}
        self._writer.write({**entry, "digest": digest(entry)})

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_journal(path: Path, finished: set[Key]) -> Journal:
    """The checkpoints of the rollouts not in `finished`, from the journal at `path` (repaired in place)."""
    journal = Journal()
    if not path.exists():
        return journal
    broken: set[Key] = set()  # rollouts with a missing turn: their later lines are skipped until they restart
    kept: dict[Key, list[bytes]] = {}
    with path.open("rb") as source:
        for number, raw in enumerate(source, start=1):
            entry = _entry(raw)
            if isinstance(entry, str):
                journal.skipped.append((number, entry))
                continue
            key = (str(entry["key"][0]), int(entry["key"][1]), int(entry["key"][2]))
            if key in finished:
                continue  # its row is in the output: this line is obsolete, not lost
            record = entry["record"]
            turn = int(record["turn"])
            checkpoint = journal.checkpoints.setdefault(key, Checkpoint())
            if turn == 1:
                broken.discard(key)  # an attempt that started over: its own lines are whole
                kept[key] = []
            elif key in broken or turn != checkpoint.turn + 1:
                broken.add(key)
                journal.skipped.append((number, f"turn {turn} of {_name(key)} after a missing turn"))
                continue
            checkpoint.extend(record)
            kept.setdefault(key, []).append(raw)
    journal.checkpoints = {k: c for k, c in journal.checkpoints.items() if c.turn}
    _rewrite(path, [line for key in journal.checkpoints for line in kept[key]])
    return journal


def _entry(raw: bytes) -> dict[str, Any] | str:
    """A journal line's entry, or why it cannot be used."""
    if not raw.endswith(b"\n"):
        return "torn (cut off mid-write)"
    try:
        entry = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "corrupt (not JSON)"
    if not isinstance(entry, dict) or not {"key", "record", "digest"} <= entry.keys():
        return "corrupt (not a journal entry)"
    if digest({"key": entry["key"], "record": entry["record"]}) != entry["digest"]:
        return "corrupt (its digest does not match its content)"
    key, record = entry["key"], entry["record"]
    if not (isinstance(key, list) and len(key) == 3 and isinstance(record, dict) and "turn" in record):
        return "corrupt (no rollout key or turn)"
    return entry


def _name(key: Key) -> str:
    return f"rollout {key[1]}:{key[2]} of `{key[0]}`"


def _rewrite(path: Path, lines: list[bytes]) -> None:
    """Replace the journal with `lines` atomically: a crash now leaves the old journal or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as target:
        target.writelines(lines)
        target.flush()
        os.fsync(target.fileno())
    tmp.replace(path)
